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
 *
 * The shared ring. When the recorder gives a ring file
 * (RAWSTACK_ALLOC_RING, a file it maps too; package allocshim's Ring
 * documents the layout), a sampled allocation does not trap at all: the
 * sampler writes the records the BPF programs would have written into
 * the ring itself — the allocation's registers at the entry of
 * rawstack_capture and the stack above them, then its block — and so
 * does every free of a sampled block, at once, with its time. Any entry
 * into the kernel costs a microsecond or more on a virtual machine with
 * mitigations, which at a few tens of thousands of samples a second was
 * most of the sampler's cost. The ring's writers (every thread of every
 * process of the recording) take a spin lock in the ring; a holder that
 * died is taken over. The markers stay for what the ring cannot take: a
 * process that cannot open the file, a thread whose stack the sampler
 * does not know, and a record that finds the ring full (the recorder,
 * starved of CPU by the program's threads, has not kept up: the trap
 * then slows the program to the recorder's pace instead of losing the
 * record) or its lock held too long (a holder stopped by a debugger).
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <signal.h>
#include <sched.h>
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

/* rawstack_capture(regs, dst, max, top) stores the registers as they are
 * at its first instruction (BPF's order: ax, bx, cx, dx, si, di, bp, sp,
 * ip, r8-r15; ip is its own address, sp points at its return address)
 * into regs[17], then copies the stack from that sp up to top, at most
 * max bytes and a multiple of 8 (none when top is not above sp), to dst,
 * and returns how many bytes it copied: the same registers and stack a
 * uprobe on its entry would give, taken while its frame is still whole. */
__asm__(".text\n"
	".globl rawstack_capture\n"
	".hidden rawstack_capture\n"
	".type rawstack_capture, @function\n"
	".p2align 4\n"
	"rawstack_capture:\n"
	".Lcapture:\n"
	".cfi_startproc\n"
	"mov %rax, 0(%rdi)\n"
	"mov %rbx, 8(%rdi)\n"
	"mov %rcx, 16(%rdi)\n"
	"mov %rdx, 24(%rdi)\n"
	"mov %rsi, 32(%rdi)\n"
	"mov %rdi, 40(%rdi)\n"
	"mov %rbp, 48(%rdi)\n"
	"mov %rsp, 56(%rdi)\n"
	"lea .Lcapture(%rip), %rax\n"
	"mov %rax, 64(%rdi)\n"
	"mov %r8, 72(%rdi)\n"
	"mov %r9, 80(%rdi)\n"
	"mov %r10, 88(%rdi)\n"
	"mov %r11, 96(%rdi)\n"
	"mov %r12, 104(%rdi)\n"
	"mov %r13, 112(%rdi)\n"
	"mov %r14, 120(%rdi)\n"
	"mov %r15, 128(%rdi)\n"
	"xor %eax, %eax\n"
	"cmp %rsp, %rcx\n"
	"jbe 1f\n"
	"mov %rcx, %rax\n"
	"sub %rsp, %rax\n"
	"cmp %rdx, %rax\n"
	"cmova %rdx, %rax\n"
	"and $-8, %rax\n"
	"mov %rax, %rcx\n"
	"mov %rsi, %rdi\n"
	"mov %rsp, %rsi\n"
	"rep movsb\n"
	"1:\n"
	"ret\n"
	".cfi_endproc\n"
	".size rawstack_capture, . - rawstack_capture\n");

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
size_t rawstack_capture(uint64_t *regs, void *dst, size_t max, uintptr_t top);

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

static void ring_open(void);

__attribute__((constructor)) static void init(void)
{
	resolve();
	ring_open();
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

/* The shared ring (package allocshim's Ring): a header page, then
 * RING_SIZE bytes of records, each an 8-byte prefix (its length, prefix
 * included, and 1 for padding up to the end of the ring, 0 for a
 * record) and the record itself, in the layout of the BPF programs'
 * records (struct rs_hdr, then for an allocation its registers and
 * stack). head and tail count bytes from the start; the writer under
 * the lock advances head once a record is whole, the recorder tail once
 * it has read one. */
#define RING_MAGIC 0x52415352u /* "RSAR" */
#define RING_VERSION 1
#define RING_HDR 4096
#define RING_MAX_STACK 16384
#define RING_SPINS 1024u
#define RING_WAIT_NS 50000000ull

struct ring_hdr {
	uint32_t magic, version;
	uint64_t size;        /* bytes of records: a power of 2 */
	uint32_t stack_bytes; /* stack copied per allocation, at most */
	uint32_t flags;
	uint64_t pidns; /* the recorder's pid namespace (its inode), 0 unknown */
	uint8_t pad0[32];
	uint32_t lock; /* the holder's thread id, 0 when free */
	uint8_t pad1[60];
	uint64_t head;
	uint8_t pad2[56];
	uint64_t tail;
	uint8_t pad3[56];
	uint64_t spilled;   /* records that went to the markers: ring full, lock held too long */
	uint64_t lost_set;  /* allocations dropped: the set of sampled blocks was full */
};

/* rs_hdr of the BPF programs (platform/linux/ebpf/bpf/rawstack.bpf.c). */
struct rs_hdr {
	uint32_t kind, pid, tid, cpu;
	uint64_t time, weight;
	uint16_t nkernel, nuser, flags, pad;
	uint32_t stack, pad2;
};
enum { RS_ALLOC = 4, RS_ALLOC_RET = 5, RS_FREE = 6 };
#define RS_REGS 1
#define NREGS 17

static struct ring_hdr *ring;
static int ring_mapped; /* this process has mapped the ring's pages */
static uint8_t *ring_data;
static uint64_t ring_size;
static uint32_t ring_stack;
static uint32_t my_pid;
static uintptr_t main_top, main_lo; /* the main thread's stack */
static TLS uintptr_t stack_top, stack_lo; /* this thread's, once known */
static TLS int stack_known; /* 1 known, -1 unknown: the markers serve */
static TLS int in_shim;     /* the sampler's own calls allocate: not sampled */
extern void *__libc_stack_end;

static uint32_t tid(void)
{
	if (!my_tid)
		my_tid = (uint32_t)syscall(SYS_gettid);
	return my_tid;
}

/* pidns returns the inode of this process's pid namespace, 0 if it
 * cannot be read. */
static uint64_t pidns(void)
{
	char b[64];
	int saved = errno;
	ssize_t n = readlink("/proc/self/ns/pid", b, sizeof(b) - 1);
	errno = saved;
	if (n <= 0)
		return 0;
	b[n] = 0;
	uint64_t v = 0;
	for (char *c = b; *c; c++)
		if (*c >= '0' && *c <= '9')
			v = v * 10 + (uint64_t)(*c - '0');
	return v;
}

/* ring_ours says whether this process writes pids the recorder knows:
 * it is in the recorder's pid namespace. A process in another (unshare
 * -p, a container the command starts) would write its own namespace's
 * pids; it takes the markers, where the BPF programs see the real ones. */
static int ring_ours(struct ring_hdr *h)
{
	return h->pidns == 0 || h->pidns == pidns();
}

/* ring_open maps the ring file the recorder named, if any. */
static void ring_open(void)
{
	const char *path = getenv("RAWSTACK_ALLOC_RING");
	if (!path || !*path)
		return;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return;
	struct stat st;
	void *m = MAP_FAILED;
	if (fstat(fd, &st) == 0 && st.st_size > RING_HDR)
		m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return;
	struct ring_hdr *h = m;
	uint64_t size = h->size;
	if (h->magic != RING_MAGIC || h->version != RING_VERSION || size < 65536 || (size & (size - 1)) ||
	    size != (uint64_t)st.st_size - RING_HDR || h->stack_bytes > RING_MAX_STACK) {
		munmap(m, (size_t)st.st_size);
		return;
	}
	if (!ring_ours(h)) {
		munmap(m, (size_t)st.st_size);
		return;
	}
	ring_size = size;
	ring_stack = h->stack_bytes & ~7u;
	ring_data = (uint8_t *)m + RING_HDR;
	my_pid = (uint32_t)getpid();
	main_top = (uintptr_t)__libc_stack_end;
	struct rlimit rl;
	uintptr_t span = (uintptr_t)1 << 30;
	if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < span)
		span = (uintptr_t)rl.rlim_cur;
	main_lo = main_top > span ? main_top - span : 0;
	__atomic_store_n(&ring, h, __ATOMIC_RELEASE);
}

/* ring_lock takes the ring's lock: 1, or 0 when another thread has held
 * it for RING_WAIT_NS (stopped by a debugger, say; the record then goes
 * to the markers, counted as spilled). A
 * waiter spins briefly, then yields the CPU, which a holder preempted
 * on a busy machine needs back. A holder that died is taken over (its
 * record was not committed: head moves only once a record is whole). */
static int ring_lock(uint32_t me)
{
	uint64_t since = 0;
	for (unsigned spins = 0;; spins++) {
		uint32_t held = 0;
		if (__atomic_compare_exchange_n(&ring->lock, &held, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return 1;
		if (spins < RING_SPINS) {
			__builtin_ia32_pause();
			continue;
		}
		uint64_t t = now_ns();
		if (!since)
			since = t;
		if (t - since < RING_WAIT_NS) {
			sched_yield();
			continue;
		}
		int saved = errno; /* free must leave errno as it was */
		int dead = held && kill((pid_t)held, 0) != 0 && errno == ESRCH;
		errno = saved;
		if (dead && __atomic_compare_exchange_n(&ring->lock, &held, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return 1;
		__atomic_add_fetch(&ring->spilled, 1, __ATOMIC_RELAXED);
		return 0;
	}
}

static void ring_unlock(void)
{
	__atomic_store_n(&ring->lock, 0, __ATOMIC_RELEASE);
}

/* ring_reserve returns where a record of up to n bytes (a multiple of
 * 8) goes, the lock held, or NULL when the ring has no room: the
 * recorder has not kept up (starved of CPU by the program's threads,
 * say), and the record goes to the markers instead, counted as spilled,
 * whose trap slows the program down to the recorder's pace instead of
 * losing it. *at gets the position of its prefix. */
static uint8_t *ring_reserve(uint64_t n, uint64_t *at)
{
	uint64_t head = ring->head, tail = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
	uint64_t off = head & (ring_size - 1), need = n + 8, pad = 0;
	if (off + need > ring_size)
		pad = ring_size - off;
	if (head - tail > ring_size || head + pad + need - tail > ring_size) {
		__atomic_add_fetch(&ring->spilled, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	if (pad) {
		uint32_t *p = (uint32_t *)(ring_data + off);
		p[0] = (uint32_t)pad;
		p[1] = 1;
		head += pad;
		off = 0;
	}
	*at = head;
	return ring_data + off + 8;
}

/* ring_commit ends the record reserved at at, len bytes long. */
static void ring_commit(uint64_t at, uint64_t len)
{
	uint32_t *p = (uint32_t *)(ring_data + (at & (ring_size - 1)));
	p[0] = (uint32_t)(len + 8);
	p[1] = 0;
	__atomic_store_n(&ring->head, at + len + 8, __ATOMIC_RELEASE);
}

static void ring_small(uint32_t kind, uint32_t t, uint64_t time, uint64_t weight)
{
	uint64_t at;
	struct rs_hdr *h = (struct rs_hdr *)ring_reserve(sizeof(struct rs_hdr), &at);
	if (!h)
		return;
	*h = (struct rs_hdr){.kind = kind, .pid = my_pid, .tid = t, .time = time, .weight = weight};
	ring_commit(at, sizeof(*h));
}

/* ring_free reports the free of sampled block k, in order with
 * everything else the ring carries: 1, or 0 when the ring had no room. */
static int ring_free(uintptr_t k)
{
	uint32_t me = tid();
	if (!ring_lock(me))
		return 0;
	uint64_t at;
	struct rs_hdr *h = (struct rs_hdr *)ring_reserve(sizeof(struct rs_hdr), &at);
	if (h) {
		*h = (struct rs_hdr){.kind = RS_FREE, .pid = my_pid, .tid = me, .time = now_ns(), .weight = k};
		ring_commit(at, sizeof(*h));
	}
	ring_unlock();
	return h != NULL;
}

/* know_stack finds this thread's stack: the main thread's from where the
 * process started, another's from its thread attributes (which
 * allocate: in_shim keeps them out of the sampler). */
static int know_stack(void)
{
	if (stack_known)
		return stack_known > 0;
	stack_known = -1;
	if (tid() == my_pid) {
		stack_lo = main_lo;
		stack_top = main_top;
	} else {
		pthread_attr_t a;
		void *lo;
		size_t size;
		if (pthread_getattr_np(pthread_self(), &a) != 0)
			return 0;
		int ok = pthread_attr_getstack(&a, &lo, &size) == 0;
		pthread_attr_destroy(&a);
		if (!ok)
			return 0;
		stack_lo = (uintptr_t)lo;
		stack_top = (uintptr_t)lo + size;
	}
	if (stack_top > stack_lo)
		stack_known = 1;
	return stack_known > 0;
}

/* ring_alloc reports a sampled allocation of block p (NULL: the set was
 * full) through the ring: its registers and stack as an RS_ALLOC record,
 * then its block as RS_ALLOC_RET, both with the same time (the room for
 * both is reserved at once, so that one never goes without the other).
 * It returns 1, or 0 when the markers must serve instead: this thread's
 * stack is not known, the stack pointer is not in it, or the ring has
 * no room. */
static __attribute__((noinline)) int ring_alloc(void *p, size_t size)
{
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
	if (!know_stack() || sp <= stack_lo || sp >= stack_top)
		return 0;
	if (!__atomic_load_n(&ring_mapped, __ATOMIC_RELAXED)) {
		/* At this process's first sample, not at its start (most
		 * processes of a command never sample): map every page of
		 * the ring (the recorder made them) in one call rather than
		 * taking a fault at each. */
		int saved = errno;
		madvise(ring_data, ring_size, 23 /* MADV_POPULATE_WRITE, Linux 5.14 */);
		errno = saved;
		__atomic_store_n(&ring_mapped, 1, __ATOMIC_RELAXED);
	}
	uint32_t me = tid();
	if (!p) {
		__atomic_add_fetch(&ring->lost_set, 1, __ATOMIC_RELAXED);
		return 1;
	}
	if (!ring_lock(me))
		return 0;
	uint64_t at;
	uint8_t *rec = ring_reserve(sizeof(struct rs_hdr) + NREGS * 8 + ring_stack + sizeof(struct rs_hdr) + 8, &at);
	if (rec) {
		struct rs_hdr *h = (struct rs_hdr *)rec;
		uint64_t *regs = (uint64_t *)(rec + sizeof(*h));
		size_t n = rawstack_capture(regs, rec + sizeof(*h) + NREGS * 8, ring_stack, stack_top);
		uint64_t t = now_ns();
		*h = (struct rs_hdr){.kind = RS_ALLOC, .pid = my_pid, .tid = me, .cpu = (uint32_t)sched_getcpu(),
				     .time = t, .weight = size, .flags = RS_REGS, .stack = (uint32_t)n};
		ring_commit(at, sizeof(*h) + NREGS * 8 + n);
		ring_small(RS_ALLOC_RET, me, t, (uint64_t)(uintptr_t)p);
	}
	ring_unlock();
	return rec != NULL;
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

/* queue_free queues the free of sampled block k for the markers, and
 * sends the queue when it is full or its oldest free is old. */
static void queue_free(uintptr_t k)
{
	size_t out = 0;
	spin_lock();
	uint64_t t = now_ns();
	queue[queued++] = (struct free_rec){.block = k, .time = t, .tid = tid()};
	if (queued == FREE_MAX || t - queue[0].time >= FREE_AGE_NS)
		out = take();
	spin_unlock();
	if (out)
		rawstack_free_sampled(outbox, out);
}

/* forget removes k if it is a sampled block, reports its free, and says
 * whether it was. */
static int forget(uintptr_t k)
{
	if (__builtin_expect(__atomic_load_n(&filter[hash(k, FILTER_BITS)], __ATOMIC_RELAXED) == 0, 1) || !lookup(k))
		return 0;
	int found = 0;
	spin_lock();
	__atomic_add_fetch(&seq, 1, __ATOMIC_ACQ_REL);
	uintptr_t *s = tab ? find(tab, k) : NULL;
	if (s) {
		__atomic_store_n(s, TOMB, __ATOMIC_RELAXED);
		tab->used--;
		uint8_t *c = &filter[hash(k, FILTER_BITS)];
		if (*c < 255)
			__atomic_store_n(c, *c - 1, __ATOMIC_RELAXED);
		found = 1;
	}
	__atomic_add_fetch(&seq, 1, __ATOMIC_ACQ_REL);
	spin_unlock();
	/* Before the block goes back to the allocator: its free is in the
	 * ring, or queued for the markers, ahead of any sample of the
	 * address again. */
	if (found && !(ring && ring_free(k)))
		queue_free(k);
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
	my_pid = (uint32_t)getpid(); /* the ring, if any, is shared with the parent */
	ring_mapped = 0;             /* but not its page tables */
	if (ring && !ring_ours(ring))
		ring = NULL; /* forked into a new pid namespace (unshare -p) */
	memset(filter, 0, sizeof(filter));
	tab = NULL;
}

/* track reports a sampled block of size bytes. */
static void track(void *p, size_t size)
{
	if (!p || in_shim)
		return;
	in_shim = 1;
	size_t n = 0;
	int ok = insert((uintptr_t)p, &n);
	if (!ring || !ring_alloc(ok ? p : NULL, size))
		rawstack_alloc_sampled(ok ? p : NULL, size, outbox, n);
	else if (n)
		rawstack_free_sampled(outbox, n); /* frees queued while the ring was full */
	in_shim = 0;
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
