/* rawstack's allocation sampler for launched programs (record --alloc --
 * CMD): preloaded (LD_PRELOAD) into the target, it interposes the C
 * allocator's entry points, passes every call to the next allocator (the
 * one the program would have called: glibc's, or jemalloc's or
 * tcmalloc's when it links them) and samples by bytes itself, so that an
 * allocation that is not sampled costs a countdown and no trap.
 *
 * Sampling is the BPF programs' (bpf/rawstack.bpf.c alloc_sampled): a
 * Poisson process over the bytes allocated, here per thread, with a mean
 * of one sampled byte in rawstack_alloc_rate (the RAWSTACK_ALLOC_RATE
 * environment variable); an allocation of s bytes is sampled with
 * probability 1 - exp(-s / rate), which the recorder unbiases.
 *
 * A sampled allocation calls rawstack_alloc_sampled(block, size, frees,
 * n), on whose entry the recorder has its one uprobe: it takes the stack
 * there as for any other sample. Sampled blocks are kept in a set until
 * freed. The free of one does not trap: it is queued (block, time from
 * the vDSO's CLOCK_MONOTONIC, which is the BPF programs' clock, thread)
 * and the queue goes to the recorder with the next sampled allocation,
 * ahead of it, so that a block's free is never reported after its
 * address is sampled again. A queue that is full, or whose oldest free
 * a new free finds FREE_AGE_NS old (a few milliseconds: format/SPEC.md
 * lets times go back that far; a program that goes quiet reports its
 * last frees at its next sampled allocation or free, or its exit), goes
 * out alone through rawstack_free_sampled(frees,
 * n), the second uprobe, as it does when the program exits. The frees of
 * other blocks cost a look-up in that set, which is empty or small at
 * the default rate.
 *
 * No libc allocation, no lock on the fast paths: the set is a
 * open-addressing table in mmap'd memory, written under a spin lock
 * (sampled allocations and frees only) and read under a sequence count.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* dlsym of the oldest version, so that the object loads on a glibc older
 * than the one it was built against (2.34 moved dlsym into libc.so.6). */
__asm__(".symver dlsym, dlsym@GLIBC_2.2.5");

#define EXPORT __attribute__((visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))

/* The recorder's uprobes. Each marker is a 5-byte nop and a return: a
 * kernel that optimizes uprobes on a nop5 (x86-64; 6.18 here, where the
 * process then maps [uprobes-trampoline]) turns the probe into a call of
 * its trampoline and a system call instead of a breakpoint trap. Written
 * in assembly, with their call frame information, so that the compiler
 * puts nothing before the nop. */
#define MARKER(name)                                      \
	__asm__(".text\n"                                 \
		".globl " #name "\n"                      \
		".type " #name ", @function\n"            \
		".p2align 4\n" #name ":\n"               \
		".cfi_startproc\n"                        \
		".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"    \
		"ret\n"                                   \
		".cfi_endproc\n"                          \
		".size " #name ", . - " #name "\n")
MARKER(rawstack_alloc_sampled);
MARKER(rawstack_free_sampled);

/* A queued free of a sampled block; the BPF programs read these. */
struct free_rec {
	uint64_t block;
	uint64_t time; /* CLOCK_MONOTONIC, ns */
	uint32_t tid;
	uint32_t pad;
};
#define FREE_MAX 32 /* bpf/rawstack.bpf.c SHIM_FREE_MAX */
#define FREE_AGE_NS 5000000ull

EXPORT void rawstack_alloc_sampled(void *block, size_t size, const struct free_rec *frees, size_t n);
EXPORT void rawstack_free_sampled(const struct free_rec *frees, size_t n);

/* The next allocator. */
static void *(*next_malloc)(size_t);
static void (*next_free)(void *);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static int (*next_posix_memalign)(void **, size_t, size_t);
static void *(*next_aligned_alloc)(size_t, size_t);
static void *(*next_memalign)(size_t, size_t);
static void *(*next_valloc)(size_t);
static void *(*next_pvalloc)(size_t);

/* Allocations made while dlsym resolves the next allocator (glibc's
 * dlsym may calloc an error buffer) come from here and are never freed. */
static char boot[4096] __attribute__((aligned(16)));
static size_t boot_used;
static int resolving;

static int in_boot(void *p)
{
	return (char *)p >= boot && (char *)p < boot + sizeof(boot);
}

static void *boot_alloc(size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (n > sizeof(boot) - boot_used)
		return NULL;
	void *p = boot + boot_used;
	boot_used += n;
	return p;
}

static unsigned long rate = 512 * 1024;

static void child_after_fork(void);

static void resolve(void)
{
	if (next_malloc || resolving)
		return;
	resolving = 1;
	next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
	next_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
	next_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
	next_posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
	next_aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
	next_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
	next_valloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "valloc");
	next_pvalloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "pvalloc");
	const char *r = getenv("RAWSTACK_ALLOC_RATE");
	if (r) {
		unsigned long v = 0;
		for (; *r >= '0' && *r <= '9'; r++)
			v = v * 10 + (unsigned long)(*r - '0');
		if (v > 0)
			rate = v;
	}
	pthread_atfork(NULL, NULL, child_after_fork);
	__atomic_store_n(&next_malloc, (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc"), __ATOMIC_RELEASE);
	resolving = 0;
}

__attribute__((constructor)) static void init(void)
{
	resolve();
}

/* Per thread: the bytes left to the next sampled byte (0: not drawn
 * yet) and the state of a xorshift generator. */
static TLS uint64_t left;
static TLS uint64_t rng;

/* neg_log returns -ln(u) for u in (0, 1]: u = m 2^e with m in [1, 2),
 * ln m = 2 atanh((m-1)/(m+1)) by its series (error below 1e-6). */
static double neg_log(double u)
{
	int e = 0;
	while (u < 1.0) {
		u *= 2.0;
		e--;
	}
	double z = (u - 1.0) / (u + 1.0), z2 = z * z;
	double s = z * (1.0 + z2 * (1.0 / 3 + z2 * (1.0 / 5 + z2 * (1.0 / 7 + z2 * (1.0 / 9 + z2 / 11)))));
	return -(e * 0.69314718055994530942 + 2.0 * s);
}

static uint64_t draw(void)
{
	if (rng == 0) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		rng = ((uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uintptr_t)&left ^ 1;
	}
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	/* u in (0, 1] from the top 53 bits. */
	double u = (double)((rng >> 11) + 1) * (1.0 / 9007199254740992.0);
	uint64_t n = (uint64_t)(neg_log(u) * (double)rate);
	return n ? n : 1;
}

/* sampled says whether an allocation of size bytes holds the next
 * sampled byte. */
static inline int sampled(size_t size)
{
	if (__builtin_expect(left > size, 1)) {
		left -= size;
		return 0;
	}
	if (left == 0) {
		left = draw();
		if (left > size) {
			left -= size;
			return 0;
		}
	}
	left = draw();
	return 1;
}

/* The queue of frees not reported yet, under the lock, and each
 * thread's copy of it while the marker reads it. */
static struct free_rec queue[FREE_MAX];
static size_t queued;
static TLS struct free_rec outbox[FREE_MAX];
static TLS uint32_t my_tid;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* take moves the queue to this thread's outbox; the caller holds the
 * lock. */
static size_t take(void)
{
	size_t n = queued;
	memcpy(outbox, queue, n * sizeof(queue[0]));
	queued = 0;
	return n;
}

/* The set of sampled blocks not freed yet. Keys are block addresses; 0
 * is an empty slot, 1 a deleted one. It grows (by doubling, under the
 * lock) up to MAX_BITS (2^21 live blocks); older tables are kept, because
 * a reader may still be in one. A full set drops the sample:
 * rawstack_alloc_sampled(NULL, size) tells the recorder, which counts it
 * lost. */
#define MIN_BITS 12
#define MAX_BITS 22
#define TOMB ((uintptr_t)1)

struct table {
	unsigned bits;
	size_t used;  /* live keys */
	size_t dirty; /* live keys and deleted slots */
	uintptr_t slot[];
};

static struct table *tab;
static unsigned seq;  /* odd while a writer changes the set */
/* A counting filter of the set, 1 KiB: the free of a block whose
 * counter is 0 was not sampled, without a look at the table. A counter
 * that reaches 255 stays there. With a few sampled blocks live (a
 * program that keeps 2 MiB at the default rate has 4), about 1 free in
 * 256 per live block takes the look-up; one cache line (64 counters)
 * sent 1 in 16 there, which was most of the sampler's own cost on the
 * alloc benchmark, and every free once 64 blocks were live. */
#define FILTER_BITS 10
static uint8_t filter[1 << FILTER_BITS] __attribute__((aligned(64)));
static int lock;

static void spin_lock(void)
{
	while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(&lock, __ATOMIC_RELAXED))
			__builtin_ia32_pause();
}

static void spin_unlock(void)
{
	__atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
}

static inline size_t hash(uintptr_t k, unsigned bits)
{
	return (size_t)(((uint64_t)k * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

static struct table *table_new(unsigned bits)
{
	void *m = mmap(NULL, sizeof(struct table) + (sizeof(uintptr_t) << bits), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	struct table *t = m;
	t->bits = bits;
	return t;
}

/* put adds k; the caller holds the lock and has room. */
static void put(struct table *t, uintptr_t k)
{
	size_t mask = ((size_t)1 << t->bits) - 1;
	for (size_t i = hash(k, t->bits);; i = (i + 1) & mask) {
		uintptr_t v = t->slot[i];
		if (v == 0 || v == TOMB) {
			__atomic_store_n(&t->slot[i], k, __ATOMIC_RELAXED);
			t->used++;
			if (v == 0)
				t->dirty++;
			return;
		}
	}
}

/* insert adds a sampled block, 0 when the set is full, and moves the
 * queued frees to this thread's outbox (*n of them). */
static int insert(uintptr_t k, size_t *n)
{
	int ok = 1;
	spin_lock();
	__atomic_add_fetch(&seq, 1, __ATOMIC_ACQ_REL);
	struct table *t = tab;
	if (!t) {
		t = table_new(MIN_BITS);
		if (t)
			__atomic_store_n(&tab, t, __ATOMIC_RELEASE);
		else
			ok = 0;
	} else if ((t->dirty + 1) * 2 > ((size_t)1 << t->bits)) {
		/* Rehash: into a table twice as big when live keys fill a
		 * quarter of it, else one of the same size without the
		 * deleted slots. */
		unsigned bits = t->bits + ((t->used + 1) * 4 > ((size_t)1 << t->bits) ? 1 : 0);
		struct table *n = bits <= MAX_BITS ? table_new(bits) : NULL;
		if (!n) {
			ok = 0;
		} else {
			for (size_t i = 0; i < ((size_t)1 << t->bits); i++)
				if (t->slot[i] > TOMB)
					put(n, t->slot[i]);
			__atomic_store_n(&tab, n, __ATOMIC_RELEASE);
			t = n;
		}
	}
	*n = take();
	if (ok) {
		put(t, k);
		uint8_t *c = &filter[hash(k, FILTER_BITS)];
		if (*c < 255)
			__atomic_store_n(c, *c + 1, __ATOMIC_RELAXED);
	}
	__atomic_add_fetch(&seq, 1, __ATOMIC_ACQ_REL);
	spin_unlock();
	return ok;
}

/* find returns k's slot in t, or NULL. */
static uintptr_t *find(struct table *t, uintptr_t k)
{
	size_t mask = ((size_t)1 << t->bits) - 1;
	for (size_t i = hash(k, t->bits), n = 0; n <= mask; i = (i + 1) & mask, n++) {
		uintptr_t v = __atomic_load_n(&t->slot[i], __ATOMIC_RELAXED);
		if (v == k)
			return &t->slot[i];
		if (v == 0)
			break;
	}
	return NULL;
}

/* lookup says whether k is in the set, without the lock: it retries
 * while a writer was at work. */
static int lookup(uintptr_t k)
{
	for (;;) {
		unsigned s = __atomic_load_n(&seq, __ATOMIC_ACQUIRE);
		if (s & 1) {
			__builtin_ia32_pause();
			continue;
		}
		struct table *t = __atomic_load_n(&tab, __ATOMIC_ACQUIRE);
		int found = t && find(t, k);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&seq, __ATOMIC_RELAXED) == s)
			return found;
	}
}

/* forget removes k if it is a sampled block, and says whether it was. */
static int forget(uintptr_t k)
{
	if (__builtin_expect(__atomic_load_n(&filter[hash(k, FILTER_BITS)], __ATOMIC_RELAXED) == 0, 1) || !lookup(k))
		return 0;
	int found = 0;
	spin_lock();
	__atomic_add_fetch(&seq, 1, __ATOMIC_ACQ_REL);
	uintptr_t *s = tab ? find(tab, k) : NULL;
	size_t out = 0;
	if (s) {
		__atomic_store_n(s, TOMB, __ATOMIC_RELAXED);
		tab->used--;
		uint8_t *c = &filter[hash(k, FILTER_BITS)];
		if (*c < 255)
			__atomic_store_n(c, *c - 1, __ATOMIC_RELAXED);
		found = 1;
		if (!my_tid)
			my_tid = (uint32_t)syscall(SYS_gettid);
		uint64_t t = now_ns();
		queue[queued++] = (struct free_rec){.block = k, .time = t, .tid = my_tid};
		if (queued == FREE_MAX || t - queue[0].time >= FREE_AGE_NS)
			out = take();
	}
	__atomic_add_fetch(&seq, 1, __ATOMIC_ACQ_REL);
	spin_unlock();
	if (out)
		rawstack_free_sampled(outbox, out);
	return found;
}

/* flush reports the queued frees, at exit. */
__attribute__((destructor)) static void flush(void)
{
	spin_lock();
	size_t out = take();
	spin_unlock();
	if (out)
		rawstack_free_sampled(outbox, out);
}

/* A child of fork has copies of its parent's blocks, not allocations of
 * its own: its set starts empty (and unlocked: the fork may have come
 * while another thread of the parent held the lock), and its generator
 * is seeded again, so that it does not draw its parent's intervals. */
static void child_after_fork(void)
{
	rng = 0;
	lock = 0;
	seq = 0;
	queued = 0;
	my_tid = 0;
	memset(filter, 0, sizeof(filter));
	tab = NULL;
}

/* track reports a sampled block of size bytes. */
static void track(void *p, size_t size)
{
	if (!p)
		return;
	size_t n = 0;
	int ok = insert((uintptr_t)p, &n);
	rawstack_alloc_sampled(ok ? p : NULL, size, outbox, n);
}

static inline void untrack(void *p)
{
	if (p)
		forget((uintptr_t)p);
}

/* The slow path of malloc: resolving the next allocator, or a sampled
 * allocation. */
static __attribute__((noinline)) void *malloc_slow(size_t size)
{
	if (!next_malloc) {
		resolve();
		if (!next_malloc)
			return boot_alloc(size);
	}
	if (!sampled(size))
		return next_malloc(size);
	void *p = next_malloc(size);
	track(p, size);
	return p;
}

/* malloc and free: the unsampled call is a countdown (a filter look-up
 * for free) and a jump to the next allocator. */
EXPORT void *malloc(size_t size)
{
	void *(*next)(size_t) = next_malloc;
	if (__builtin_expect(next && left > size, 1)) {
		left -= size;
		return next(size);
	}
	return malloc_slow(size);
}

static __attribute__((noinline)) void free_slow(void *p)
{
	if (in_boot(p))
		return;
	if (!next_free)
		resolve();
	untrack(p);
	next_free(p);
}

EXPORT void free(void *p)
{
	void (*next)(void *) = next_free;
	if (__builtin_expect(next && !__atomic_load_n(&filter[hash((uintptr_t)p, FILTER_BITS)], __ATOMIC_RELAXED) && !in_boot(p), 1))
		return next(p);
	if (p)
		free_slow(p);
}

EXPORT void *calloc(size_t n, size_t size)
{
	if (__builtin_expect(!next_calloc, 0)) {
		resolve();
		if (!next_calloc) {
			if (size && n > (size_t)-1 / size)
				return NULL;
			return boot_alloc(n * size); /* boot is zeroed */
		}
	}
	void *p = next_calloc(n, size);
	size_t total = size && n > (size_t)-1 / size ? (size_t)-1 : n * size;
	if (__builtin_expect(sampled(total), 0))
		track(p, total);
	return p;
}

EXPORT void *realloc(void *old, size_t size)
{
	if (__builtin_expect(!next_realloc, 0)) {
		resolve();
		if (!next_realloc)
			return NULL;
	}
	if (old && in_boot(old)) {
		/* A block of the boot arena moves to the real allocator. */
		void *p = malloc(size);
		if (p)
			memcpy(p, old, (size_t)(boot + sizeof(boot) - (char *)old) < size ? (size_t)(boot + sizeof(boot) - (char *)old) : size);
		return p;
	}
	/* realloc(p, n) frees p and allocates n bytes (the BPF programs
	 * count it so too); realloc(p, 0) frees. */
	untrack(old);
	void *p = next_realloc(old, size);
	if (size && __builtin_expect(sampled(size), 0))
		track(p, size);
	return p;
}

EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
	if (__builtin_expect(!next_posix_memalign, 0)) {
		resolve();
		if (!next_posix_memalign)
			return ENOMEM;
	}
	int rc = next_posix_memalign(out, align, size);
	if (rc == 0 && __builtin_expect(sampled(size), 0))
		track(*out, size);
	return rc;
}

#define ALIGNED(name, next)                                                     \
	EXPORT void *name(size_t align, size_t size)                            \
	{                                                                       \
		if (__builtin_expect(!next, 0)) {                               \
			resolve();                                              \
			if (!next)                                              \
				return NULL;                                    \
		}                                                               \
		void *p = next(align, size);                                    \
		if (__builtin_expect(sampled(size), 0))                         \
			track(p, size);                                         \
		return p;                                                       \
	}

ALIGNED(aligned_alloc, next_aligned_alloc)
ALIGNED(memalign, next_memalign)

#define PAGED(name, next)                                                       \
	EXPORT void *name(size_t size)                                          \
	{                                                                       \
		if (__builtin_expect(!next, 0)) {                               \
			resolve();                                              \
			if (!next)                                              \
				return NULL;                                    \
		}                                                               \
		void *p = next(size);                                           \
		if (__builtin_expect(sampled(size), 0))                         \
			track(p, size);                                         \
		return p;                                                       \
	}

PAGED(valloc, next_valloc)
PAGED(pvalloc, next_pvalloc)
