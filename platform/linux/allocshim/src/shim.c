/* rawstack's allocation sampler. Preloaded (LD_PRELOAD) into a program
 * rawstack launches (record --alloc -- CMD), or loaded into a running
 * one by injection (record --alloc -p PID: a remote dlopen through
 * ptrace, then rawstack_attach, which points the allocator slots of
 * every loaded module here), it takes the C allocator's entry points
 * (malloc, calloc, realloc, free, posix_memalign, aligned_alloc,
 * memalign, valloc, pvalloc, and C++'s operator new and delete), passes
 * every call to the next allocator (the one the program would have
 * called: glibc's, or jemalloc's or tcmalloc's when it links them) and
 * samples by bytes itself, so that an allocation that is not sampled
 * costs a countdown and no trap.
 *
 * Sampling is the BPF programs' (bpf/rawstack.bpf.c alloc_sampled): a
 * Poisson process over the bytes allocated, here per thread, with a mean
 * of one sampled byte in rate bytes (the RAWSTACK_ALLOC_RATE
 * environment variable, or rawstack_attach's argument); an allocation of
 * s bytes is sampled with probability 1 - exp(-s / rate), which the
 * recorder unbiases.
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
 * (RAWSTACK_ALLOC_RING, or rawstack_attach's argument: a file it maps
 * too; package allocshim's Ring documents the layout), a sampled
 * allocation does not trap at all: the sampler writes the records the
 * BPF programs would have written into the ring itself — the
 * allocation's registers at the entry of rawstack_capture and the stack
 * above them, then its block — and so does every free of a sampled
 * block, at once, with its time. Any entry into the kernel costs a
 * microsecond or more on a virtual machine with mitigations, which at a
 * few tens of thousands of samples a second was most of the sampler's
 * cost. The ring's writers (every thread of every process of the
 * recording) take a spin lock in the ring; a holder that died is taken
 * over. The markers stay for what the ring cannot take: a process that
 * cannot open the file, a thread whose stack the sampler does not know,
 * and a record that finds the ring full (the recorder, starved of CPU by
 * the program's threads, has not kept up: the trap then slows the
 * program to the recorder's pace instead of losing the record) or its
 * lock held too long (a holder stopped by a debugger). A recorder with
 * no markers (the perf back end: RING_WAIT) has the writer wait for room
 * instead, and what cannot wait is counted dropped. A frame-pointer
 * recording without markers (RING_FP) gets the return addresses of the
 * frame-pointer chain, walked here in the thread's stack, instead of a
 * stack copy.
 *
 * Detaching. The recorder stamps the ring at every read (alive). At a
 * sampled allocation the sampler looks: a ring the recorder left
 * (detached), or did not stamp for ALIVE_NS (the recorder was killed),
 * makes the sampler inert for good: it forgets its sampled blocks,
 * replaces the ring's pages and its set's with empty anonymous memory
 * (a thread still writing there writes into nothing that matters) and
 * from then on an allocation costs its countdown and a jump to the next
 * allocator, a free a look-up in the (empty) filter and a jump. A clean
 * detach also calls rawstack_detach, which puts back every slot it
 * changed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
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
 * than the one it was built against (2.34 moved dlsym into libc.so.6):
 * each architecture's first glibc. */
#if defined(__x86_64__)
__asm__(".symver dlsym, dlsym@GLIBC_2.2.5");
__asm__(".symver dladdr, dladdr@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym, dlsym@GLIBC_2.17");
__asm__(".symver dladdr, dladdr@GLIBC_2.17");
#endif

/* CPU_RELAX is a spin loop's pause. */
#if defined(__x86_64__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ volatile("yield" ::: "memory")
#endif

#define EXPORT __attribute__((visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))

/* The recorder's uprobes. Each marker is a nop and a return. On x86-64
 * the nop is 5 bytes: a kernel that optimizes uprobes on a nop5 (6.18
 * here, where the process then maps [uprobes-trampoline]) turns the probe
 * into a call of its trampoline and a system call instead of a
 * breakpoint trap. Written in assembly, with their call frame
 * information, so that the compiler puts nothing before the nop. */
#if defined(__x86_64__)
#define MARKER_NOP ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
#elif defined(__aarch64__)
#define MARKER_NOP "nop\n"
#endif
#define MARKER(name)                                      \
	__asm__(".text\n"                                 \
		".globl " #name "\n"                      \
		".type " #name ", %function\n"            \
		".p2align 4\n" #name ":\n"               \
		".cfi_startproc\n"                        \
		MARKER_NOP                                \
		"ret\n"                                   \
		".cfi_endproc\n"                          \
		".size " #name ", . - " #name "\n")
MARKER(rawstack_alloc_sampled);
MARKER(rawstack_free_sampled);

/* rawstack_capture(regs, dst, max, top) stores the registers as they are
 * at its first instruction into regs[NREGS], then copies the stack from
 * that sp up to top, at most max bytes and a multiple of 8 (none when top
 * is not above sp), to dst, and returns how many bytes it copied: the
 * same registers and stack a uprobe on its entry would give, taken while
 * its frame is still whole. The registers are in BPF's order (the
 * recorder's tracking.SampleNRegs): on x86-64 ax, bx, cx, dx, si, di, bp,
 * sp, ip, r8-r15 (ip its own address, sp pointing at its return
 * address); on arm64 x0-x30, sp, pc (x30 the return address). */
#if defined(__x86_64__)
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
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl rawstack_capture\n"
	".hidden rawstack_capture\n"
	".type rawstack_capture, %function\n"
	".p2align 4\n"
	"rawstack_capture:\n"
	".Lcapture:\n"
	".cfi_startproc\n"
	"stp x0, x1, [x0, #0]\n"
	"stp x2, x3, [x0, #16]\n"
	"stp x4, x5, [x0, #32]\n"
	"stp x6, x7, [x0, #48]\n"
	"stp x8, x9, [x0, #64]\n"
	"stp x10, x11, [x0, #80]\n"
	"stp x12, x13, [x0, #96]\n"
	"stp x14, x15, [x0, #112]\n"
	"stp x16, x17, [x0, #128]\n"
	"stp x18, x19, [x0, #144]\n"
	"stp x20, x21, [x0, #160]\n"
	"stp x22, x23, [x0, #176]\n"
	"stp x24, x25, [x0, #192]\n"
	"stp x26, x27, [x0, #208]\n"
	"stp x28, x29, [x0, #224]\n"
	"mov x9, sp\n"
	"stp x30, x9, [x0, #240]\n"
	"adr x10, .Lcapture\n"
	"str x10, [x0, #256]\n"
	"mov x0, #0\n"
	"cmp x3, x9\n"
	"b.ls 2f\n"
	"sub x0, x3, x9\n"
	"cmp x0, x2\n"
	"csel x0, x2, x0, hi\n"
	"and x0, x0, #~7\n"
	"mov x11, #0\n"
	"1:\n"
	"cmp x11, x0\n"
	"b.hs 2f\n"
	"ldr x12, [x9, x11]\n"
	"str x12, [x1, x11]\n"
	"add x11, x11, #8\n"
	"b 1b\n"
	"2:\n"
	"ret\n"
	".cfi_endproc\n"
	".size rawstack_capture, . - rawstack_capture\n");
#endif

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

/* The next allocator: what the program would have called. The C++
 * operators are called with three word arguments whatever they take (the
 * extra ones are ignored by the callee in the x86-64 and arm64 calling
 * conventions), so that one shape serves each family. */
typedef void *(*new_fn)(size_t, uintptr_t, uintptr_t);
typedef void (*delete_fn)(void *, uintptr_t, uintptr_t);
static void *(*next_malloc)(size_t);
static void (*next_free)(void *);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static int (*next_posix_memalign)(void **, size_t, size_t);
static void *(*next_aligned_alloc)(size_t, size_t);
static void *(*next_memalign)(size_t, size_t);
static void *(*next_valloc)(size_t);
static void *(*next_pvalloc)(size_t);
enum { NEW_PLAIN, NEW_ARRAY, NEW_NOTHROW, NEW_ARRAY_NOTHROW, NEW_ALIGNED, NEW_ARRAY_ALIGNED, NEW_ALIGNED_NOTHROW, NEW_ARRAY_ALIGNED_NOTHROW, NNEW };
enum { DEL_PLAIN, DEL_ARRAY, DEL_SIZED, DEL_ARRAY_SIZED, DEL_ALIGNED, DEL_ARRAY_ALIGNED, DEL_SIZED_ALIGNED, DEL_ARRAY_SIZED_ALIGNED, DEL_NOTHROW, DEL_ARRAY_NOTHROW, NDEL };
static new_fn next_new[NNEW];
static delete_fn next_delete[NDEL];

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

/* The sampler's state: sampling (ATTACHED), or not (DETACHED: before
 * rawstack_attach when injected, and for good once the recorder has
 * gone). */
enum { DETACHED, ATTACHED, DETACHING };
static int state;
static int injected; /* loaded by rawstack_attach's recorder, not preloaded */

static void child_after_fork(void);

/* The entries, by the symbol a module's slot names: the sampler's
 * function and where the next one is kept. Filled below, after the
 * functions. */
struct entry {
	const char *name;
	void *hook;
	void **next;
};
static const struct entry entries[27];
#define nentries (sizeof(entries) / sizeof(entries[0]))

static void parse_rate(const char *r)
{
	unsigned long v = 0;
	for (; r && *r >= '0' && *r <= '9'; r++)
		v = v * 10 + (unsigned long)(*r - '0');
	if (v > 0)
		rate = v;
}

/* resolve finds the next allocator of a preloaded sampler: the
 * definitions after it in the lookup order. */
static void resolve(void)
{
	if (next_malloc || resolving || injected)
		return;
	resolving = 1;
	for (size_t i = 0; i < nentries; i++)
		if (entries[i].next != (void **)&next_malloc)
			*entries[i].next = dlsym(RTLD_NEXT, entries[i].name);
	parse_rate(getenv("RAWSTACK_ALLOC_RATE"));
	pthread_atfork(NULL, NULL, child_after_fork);
	__atomic_store_n(&state, ATTACHED, __ATOMIC_RELEASE);
	__atomic_store_n(&next_malloc, (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc"), __ATOMIC_RELEASE);
	resolving = 0;
}

static void ring_open(const char *path);
static void *s_malloc(size_t size);

/* A preloaded sampler starts at once; one loaded by dlopen (its malloc
 * is not the one the program's calls find) waits for rawstack_attach. */
__attribute__((constructor)) static void init(void)
{
	if (dlsym(RTLD_DEFAULT, "malloc") != (void *)s_malloc) {
		injected = 1;
		return;
	}
	resolve();
	ring_open(getenv("RAWSTACK_ALLOC_RING"));
}

/* Per thread: the bytes left to the next sampled byte (0: not drawn
 * yet) and the state of a xorshift generator. */
static TLS uint64_t left;
static TLS uint64_t rng;
static TLS int in_shim; /* the sampler's own calls allocate: not sampled */
static TLS int in_new;  /* inside the next operator new, whose malloc is not sampled again */

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

static int active(void);

/* sampled says whether an allocation of size bytes holds the next
 * sampled byte (and the sampler is attached). */
static inline int sampled(size_t size)
{
	if (__builtin_expect(left > size, 1)) {
		left -= size;
		return 0;
	}
	if (in_new)
		return 0; /* operator new counts these bytes, and puts left back */
	if (left == 0) {
		left = draw();
		if (left > size) {
			left -= size;
			return 0;
		}
	}
	left = draw();
	return active();
}

/* The queue of frees not reported yet, under the lock. */
static struct free_rec queue[FREE_MAX];
static size_t queued;
static TLS uint32_t my_tid;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* take moves the queue to out; the caller holds the lock. */
static size_t take(struct free_rec *out)
{
	size_t n = queued;
	memcpy(out, queue, n * sizeof(queue[0]));
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
#define RING_VERSION 3
#define RING_HDR 4096
#define RING_MAX_STACK 16384
#define RING_SPINS 1024u
#define RING_WAIT_NS 50000000ull
#define RING_FLAG_WAIT 1 /* no markers: wait for room, count what cannot wait */
#define RING_FLAG_FP 2   /* no stack copy: the frame-pointer chain's return addresses */
#define MAX_FP 127       /* the most of them (the recorder's cap on user frames) */
#define ALIVE_NS 5000000000ull
#define DETACH_CLEAN 1 /* detached: the recorder left */
#define DETACH_SILENT 2 /* detached: the recorder stopped stamping */

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
	uint64_t spilled;  /* records that went to the markers: ring full, lock held too long */
	uint64_t lost_set; /* allocations dropped: the set of sampled blocks was full */
	uint64_t alive;    /* CLOCK_MONOTONIC of the recorder's last read, ns (0: none yet) */
	uint32_t detached; /* DETACH_CLEAN, DETACH_SILENT */
	uint32_t pad4;
	uint64_t dropped; /* records lost: no markers (RING_FLAG_WAIT) and no room, or no stack */
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
#if defined(__x86_64__)
#define NREGS 17
#elif defined(__aarch64__)
#define NREGS 33
#endif

static struct ring_hdr *ring;
/* beat is the ring's header, for the recorder's stamp, also when the
 * ring itself is not written (another pid namespace: the markers serve). */
static struct ring_hdr *beat;
static int ring_mapped; /* this process has mapped the ring's pages */
static uint64_t ring_size;
static uint32_t ring_stack;
static int ring_wait; /* RING_FLAG_WAIT */
static int ring_fp;   /* RING_FLAG_FP */
static uint32_t my_pid;
static uintptr_t main_top, main_lo; /* the main thread's stack */
static TLS uintptr_t stack_top, stack_lo; /* this thread's, once known */
static TLS int stack_known; /* 1 known, -1 unknown: the markers serve */
extern void *__libc_stack_end;

static uint8_t *ring_data(struct ring_hdr *r)
{
	return (uint8_t *)r + RING_HDR;
}

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

/* markerless returns the ring's header when its recorder has no markers
 * (RING_FLAG_WAIT) and this process does not write the ring (another
 * pid namespace): a sampled allocation is then counted dropped there,
 * and no free is queued for markers nobody probes. NULL otherwise. */
static struct ring_hdr *markerless(void)
{
	struct ring_hdr *b = __atomic_load_n(&beat, __ATOMIC_ACQUIRE);
	return b && !__atomic_load_n(&ring, __ATOMIC_ACQUIRE) && (b->flags & RING_FLAG_WAIT) ? b : NULL;
}

/* ring_open maps the ring file at path, if any. */
static void ring_open(const char *path)
{
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
	    size != (uint64_t)st.st_size - RING_HDR || h->stack_bytes > RING_MAX_STACK || h->detached) {
		munmap(m, (size_t)st.st_size);
		return;
	}
	ring_size = size;
	__atomic_store_n(&beat, h, __ATOMIC_RELEASE);
	if (!ring_ours(h))
		return;
	ring_stack = h->stack_bytes & ~7u;
	ring_wait = (h->flags & RING_FLAG_WAIT) != 0;
	ring_fp = (h->flags & RING_FLAG_FP) != 0;
	ring_mapped = 0;
	my_pid = (uint32_t)getpid();
	main_top = (uintptr_t)__libc_stack_end;
	struct rlimit rl;
	uintptr_t span = (uintptr_t)1 << 30;
	if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < span)
		span = (uintptr_t)rl.rlim_cur;
	main_lo = main_top > span ? main_top - span : 0;
	__atomic_store_n(&ring, h, __ATOMIC_RELEASE);
}

/* ring_lock takes r's lock: 1, or 0 when another thread has held it for
 * RING_WAIT_NS (stopped by a debugger, say; the record then goes to the
 * markers, counted as spilled, or is dropped when there are none). A
 * waiter spins briefly, then yields the CPU, which a holder preempted
 * on a busy machine needs back. A holder that died is taken over (its
 * record was not committed: head moves only once a record is whole). */
static int ring_lock(struct ring_hdr *r, uint32_t me)
{
	uint64_t since = 0;
	for (unsigned spins = 0;; spins++) {
		uint32_t held = 0;
		if (__atomic_compare_exchange_n(&r->lock, &held, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return 1;
		if (spins < RING_SPINS) {
			CPU_RELAX();
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
		if (dead && __atomic_compare_exchange_n(&r->lock, &held, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return 1;
		__atomic_add_fetch(ring_wait ? &r->dropped : &r->spilled, 1, __ATOMIC_RELAXED);
		return 0;
	}
}

static void ring_unlock(struct ring_hdr *r)
{
	__atomic_store_n(&r->lock, 0, __ATOMIC_RELEASE);
}

/* ring_room says whether n more bytes (a record's, with its prefix and
 * the padding it may need) fit in r now. */
static int ring_room(struct ring_hdr *r, uint64_t n)
{
	uint64_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE), tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
	return head - tail <= ring_size && head - tail + 2 * (n + 8) <= ring_size;
}

/* ring_wait_room waits, without the lock, until n bytes fit in a ring
 * whose recorder has no markers (RING_FLAG_WAIT), while it reads: a
 * full ring means it has not kept up, and waiting slows the program to
 * its pace instead of losing the record. */
static void ring_wait_room(struct ring_hdr *r, uint64_t n)
{
	if (!ring_wait)
		return;
	while (!ring_room(r, n) && active()) {
		struct timespec ts = {0, 200000};
		int saved = errno;
		nanosleep(&ts, NULL);
		errno = saved;
	}
}

/* ring_reserve returns where a record of up to n bytes (a multiple of
 * 8) goes, r's lock held, or NULL when the ring has no room: the
 * recorder has not kept up (starved of CPU by the program's threads,
 * say), and the record goes to the markers instead, counted as spilled,
 * whose trap slows the program down to the recorder's pace instead of
 * losing it. *at gets the position of its prefix. */
static uint8_t *ring_reserve(struct ring_hdr *r, uint64_t n, uint64_t *at)
{
	uint64_t head = r->head, tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
	uint64_t off = head & (ring_size - 1), need = n + 8, pad = 0;
	uint8_t *data = ring_data(r);
	if (off + need > ring_size)
		pad = ring_size - off;
	if (head - tail > ring_size || head + pad + need - tail > ring_size) {
		__atomic_add_fetch(ring_wait ? &r->dropped : &r->spilled, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	if (pad) {
		uint32_t *p = (uint32_t *)(data + off);
		p[0] = (uint32_t)pad;
		p[1] = 1;
		head += pad;
		off = 0;
	}
	*at = head;
	return data + off + 8;
}

/* ring_commit ends the record reserved at at, len bytes long. */
static void ring_commit(struct ring_hdr *r, uint64_t at, uint64_t len)
{
	uint32_t *p = (uint32_t *)(ring_data(r) + (at & (ring_size - 1)));
	p[0] = (uint32_t)(len + 8);
	p[1] = 0;
	__atomic_store_n(&r->head, at + len + 8, __ATOMIC_RELEASE);
}

static void ring_small(struct ring_hdr *r, uint32_t kind, uint32_t t, uint64_t time, uint64_t weight)
{
	uint64_t at;
	struct rs_hdr *h = (struct rs_hdr *)ring_reserve(r, sizeof(struct rs_hdr), &at);
	if (!h)
		return;
	*h = (struct rs_hdr){.kind = kind, .pid = my_pid, .tid = t, .time = time, .weight = weight};
	ring_commit(r, at, sizeof(*h));
}

/* ring_free reports the free of sampled block k, in order with
 * everything else the ring carries: 1, or 0 when the ring had no room
 * (or is gone). */
static int ring_free(uintptr_t k)
{
	struct ring_hdr *r = __atomic_load_n(&ring, __ATOMIC_ACQUIRE);
	if (!r)
		return 0;
	uint32_t me = tid();
	ring_wait_room(r, sizeof(struct rs_hdr));
	if (!ring_lock(r, me))
		return ring_wait;
	uint64_t at;
	struct rs_hdr *h = (struct rs_hdr *)ring_reserve(r, sizeof(struct rs_hdr), &at);
	if (h) {
		*h = (struct rs_hdr){.kind = RS_FREE, .pid = my_pid, .tid = me, .time = now_ns(), .weight = k};
		ring_commit(r, at, sizeof(*h));
	}
	ring_unlock(r);
	return h != NULL || ring_wait;
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

/* fp_walk stores the return addresses of the frame-pointer chain from
 * its own frame up (the sampler's frames, its entry's, then the
 * program's) into pcs, at most max, as the kernel's walk of a
 * frame-pointer recording would, and returns how many. Each frame record
 * (the caller's frame pointer, then the return address) must lie in
 * this thread's stack below top, above the one before: a program built
 * without frame pointers leaves anything in the register, and the walk
 * stops where it leads out of the stack, never reading elsewhere. */
static __attribute__((noinline)) size_t fp_walk(uint64_t *pcs, size_t max, uintptr_t top)
{
	uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
	size_t n = 0;
	while (n < max && fp % sizeof(uintptr_t) == 0 && fp < top && top - fp >= 2 * sizeof(uintptr_t)) {
		const uintptr_t *frame = (const uintptr_t *)fp;
		if (!frame[1])
			break;
		pcs[n++] = frame[1];
		if (frame[0] <= fp)
			break;
		fp = frame[0];
	}
	return n;
}

/* ring_alloc reports a sampled allocation of block p (NULL: the set was
 * full) through the ring: its registers and stack as an RS_ALLOC record,
 * then its block as RS_ALLOC_RET, both with the same time (the room for
 * both is reserved at once, so that one never goes without the other).
 * It returns 1, or 0 when the markers must serve instead: this thread's
 * stack is not known, the stack pointer is not in it, or the ring has
 * no room (with no markers, RING_FLAG_WAIT, such a record is dropped and
 * counted). */
static __attribute__((noinline)) int ring_alloc(struct ring_hdr *r, void *p, size_t size)
{
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
	if (!know_stack() || sp <= stack_lo || sp >= stack_top) {
		if (ring_wait)
			__atomic_add_fetch(&r->dropped, 1, __ATOMIC_RELAXED);
		return ring_wait;
	}
	if (!__atomic_load_n(&ring_mapped, __ATOMIC_RELAXED)) {
		/* At this process's first sample, not at its start (most
		 * processes of a command never sample): map every page of
		 * the ring (the recorder made them) in one call rather than
		 * taking a fault at each. */
		int saved = errno;
		madvise(r, RING_HDR + ring_size, 23 /* MADV_POPULATE_WRITE, Linux 5.14 */);
		errno = saved;
		__atomic_store_n(&ring_mapped, 1, __ATOMIC_RELAXED);
	}
	uint32_t me = tid();
	if (!p) {
		__atomic_add_fetch(&r->lost_set, 1, __ATOMIC_RELAXED);
		return 1;
	}
	uint64_t n = sizeof(struct rs_hdr) + NREGS * 8 + (ring_fp ? MAX_FP * 8 : ring_stack) + sizeof(struct rs_hdr) + 8;
	ring_wait_room(r, n);
	if (!ring_lock(r, me))
		return ring_wait;
	uint64_t at;
	uint8_t *rec = ring_reserve(r, n, &at);
	if (rec) {
		struct rs_hdr *h = (struct rs_hdr *)rec;
		uint64_t *regs = (uint64_t *)(rec + sizeof(*h));
		size_t got = 0, nuser = 0;
		if (ring_fp) /* the registers' place stays (the layout), unused */
			nuser = fp_walk(regs + NREGS, MAX_FP, stack_top);
		else
			got = rawstack_capture(regs, rec + sizeof(*h) + NREGS * 8, ring_stack, stack_top);
		uint64_t t = now_ns();
		*h = (struct rs_hdr){.kind = RS_ALLOC, .pid = my_pid, .tid = me, .cpu = (uint32_t)sched_getcpu(), .time = t, .weight = size,
				     .nuser = (uint16_t)nuser, .flags = ring_fp ? 0 : RS_REGS, .stack = (uint32_t)got};
		ring_commit(r, at, sizeof(*h) + NREGS * 8 + nuser * 8 + got);
		ring_small(r, RS_ALLOC_RET, me, t, (uint64_t)(uintptr_t)p);
	}
	ring_unlock(r);
	return rec != NULL || ring_wait;
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
static struct table *tables[MAX_BITS + 1]; /* every table made, to release at detach */
static unsigned ntables;
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
			CPU_RELAX();
}

static void spin_unlock(void)
{
	__atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
}

static inline size_t hash(uintptr_t k, unsigned bits)
{
	return (size_t)(((uint64_t)k * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

static size_t table_bytes(unsigned bits)
{
	return sizeof(struct table) + (sizeof(uintptr_t) << bits);
}

static struct table *table_new(unsigned bits)
{
	if (ntables >= sizeof(tables) / sizeof(tables[0]))
		return NULL;
	void *m = mmap(NULL, table_bytes(bits), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	struct table *t = m;
	t->bits = bits;
	tables[ntables++] = t;
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

/* insert adds a sampled block, 0 when the set is full. */
static int insert(uintptr_t k)
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
		struct table *nt = bits <= MAX_BITS ? table_new(bits) : NULL;
		if (!nt) {
			ok = 0;
		} else {
			for (size_t i = 0; i < ((size_t)1 << t->bits); i++)
				if (t->slot[i] > TOMB)
					put(nt, t->slot[i]);
			__atomic_store_n(&tab, nt, __ATOMIC_RELEASE);
			t = nt;
		}
	}
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
			CPU_RELAX();
			continue;
		}
		struct table *t = __atomic_load_n(&tab, __ATOMIC_ACQUIRE);
		int found = t && t->bits && find(t, k);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&seq, __ATOMIC_RELAXED) == s)
			return found;
	}
}

/* queue_free queues the free of sampled block k for the markers, and
 * sends the queue when it is full or its oldest free is old. */
static void queue_free(uintptr_t k)
{
	struct free_rec out[FREE_MAX];
	size_t n = 0;
	spin_lock();
	uint64_t t = now_ns();
	queue[queued++] = (struct free_rec){.block = k, .time = t, .tid = tid()};
	if (queued == FREE_MAX || t - queue[0].time >= FREE_AGE_NS)
		n = take(out);
	spin_unlock();
	if (n)
		rawstack_free_sampled(out, n);
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
	uintptr_t *s = tab && tab->bits ? find(tab, k) : NULL;
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
	if (found && __atomic_load_n(&state, __ATOMIC_ACQUIRE) == ATTACHED && !ring_free(k) && !markerless())
		queue_free(k);
	return found;
}

static void send_queue(void);

/* flush reports the queued frees, at exit. */
__attribute__((destructor)) static void flush(void)
{
	send_queue();
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

/* marker_alloc reports a sampled allocation through the marker, with
 * the frees queued before it (on this frame's stack while the marker
 * reads them). */
static __attribute__((noinline)) void marker_alloc(void *p, size_t size)
{
	struct free_rec out[FREE_MAX];
	spin_lock();
	size_t n = take(out);
	spin_unlock();
	rawstack_alloc_sampled(p, size, out, n);
}

/* send_queue sends the queued frees through their marker. */
static __attribute__((noinline)) void send_queue(void)
{
	struct free_rec out[FREE_MAX];
	spin_lock();
	size_t n = take(out);
	spin_unlock();
	if (n)
		rawstack_free_sampled(out, n);
}

/* track reports a sampled block of size bytes. */
static void track(void *p, size_t size)
{
	if (!p || in_shim)
		return;
	in_shim = 1;
	int ok = insert((uintptr_t)p);
	struct ring_hdr *r = __atomic_load_n(&ring, __ATOMIC_ACQUIRE), *b;
	if (!r && (b = markerless()))
		__atomic_add_fetch(&b->dropped, 1, __ATOMIC_RELAXED);
	else if (!r || !ring_alloc(r, ok ? p : NULL, size))
		marker_alloc(ok ? p : NULL, size);
	else if (__atomic_load_n(&queued, __ATOMIC_RELAXED))
		send_queue(); /* frees queued while the ring was full */
	in_shim = 0;
}

static inline void untrack(void *p)
{
	if (p)
		forget((uintptr_t)p);
}

/* The entries. Each is a function of its own that returns to its
 * caller (no tail call), so that the stack of a sampled allocation has
 * the entry's frame right below the caller's: the recorder cuts the
 * sampler's own frames above it. */
#define KEEP_FRAME(v) __asm__ volatile("" : "+r"(v))

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
static void *s_malloc(size_t size)
{
	void *(*next)(size_t) = next_malloc;
	if (__builtin_expect(next && left > size, 1)) {
		left -= size;
		return next(size);
	}
	void *p = malloc_slow(size);
	KEEP_FRAME(p);
	return p;
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

static void s_free(void *p)
{
	void (*next)(void *) = next_free;
	if (__builtin_expect(next && !__atomic_load_n(&filter[hash((uintptr_t)p, FILTER_BITS)], __ATOMIC_RELAXED) && !in_boot(p), 1))
		return next(p);
	if (p)
		free_slow(p);
}

static void *s_calloc(size_t n, size_t size)
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

static void *s_realloc(void *old, size_t size)
{
	if (__builtin_expect(!next_realloc, 0)) {
		resolve();
		if (!next_realloc)
			return NULL;
	}
	if (old && in_boot(old)) {
		/* A block of the boot arena moves to the real allocator. */
		void *p = s_malloc(size);
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

static int s_posix_memalign(void **out, size_t align, size_t size)
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
	static void *s_##name(size_t align, size_t size)                        \
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
	static void *s_##name(size_t size)                                      \
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

/* lazy finds a C++ operator that a library loaded after the sampler
 * brought (libstdc++ dlopen'd by a plugin). */
static void *lazy(void **next, const char *name)
{
	void *f = __atomic_load_n(next, __ATOMIC_ACQUIRE);
	if (!f) {
		f = dlsym(injected ? RTLD_DEFAULT : RTLD_NEXT, name);
		__atomic_store_n(next, f, __ATOMIC_RELEASE);
	}
	return f;
}

/* operator new: the next one's own call of malloc (libstdc++'s) is not
 * counted again: in_new keeps it out of sampling and the countdown is
 * put back as it was. */
#define NEW(sym, i)                                                                         \
	static void *s_##sym(size_t size, uintptr_t a, uintptr_t b)                         \
	{                                                                                   \
		new_fn next = (new_fn)lazy((void **)&next_new[i], #sym);                    \
		uint64_t l = left;                                                          \
		int was = in_new;                                                           \
		in_new = 1;                                                                 \
		void *p = next(size, a, b);                                                 \
		in_new = was;                                                               \
		left = l;                                                                   \
		if (__builtin_expect(!was && sampled(size), 0))                             \
			track(p, size);                                                     \
		KEEP_FRAME(p);                                                              \
		return p;                                                                   \
	}
#define DELETE(sym, i)                                                                      \
	static void s_##sym(void *p, uintptr_t a, uintptr_t b)                              \
	{                                                                                   \
		delete_fn next = (delete_fn)lazy((void **)&next_delete[i], #sym);           \
		untrack(p);                                                                 \
		next(p, a, b);                                                              \
		KEEP_FRAME(p);                                                              \
	}
NEW(_Znwm, NEW_PLAIN)
NEW(_Znam, NEW_ARRAY)
NEW(_ZnwmRKSt9nothrow_t, NEW_NOTHROW)
NEW(_ZnamRKSt9nothrow_t, NEW_ARRAY_NOTHROW)
NEW(_ZnwmSt11align_val_t, NEW_ALIGNED)
NEW(_ZnamSt11align_val_t, NEW_ARRAY_ALIGNED)
NEW(_ZnwmSt11align_val_tRKSt9nothrow_t, NEW_ALIGNED_NOTHROW)
NEW(_ZnamSt11align_val_tRKSt9nothrow_t, NEW_ARRAY_ALIGNED_NOTHROW)
DELETE(_ZdlPv, DEL_PLAIN)
DELETE(_ZdaPv, DEL_ARRAY)
DELETE(_ZdlPvm, DEL_SIZED)
DELETE(_ZdaPvm, DEL_ARRAY_SIZED)
DELETE(_ZdlPvSt11align_val_t, DEL_ALIGNED)
DELETE(_ZdaPvSt11align_val_t, DEL_ARRAY_ALIGNED)
DELETE(_ZdlPvmSt11align_val_t, DEL_SIZED_ALIGNED)
DELETE(_ZdaPvmSt11align_val_t, DEL_ARRAY_SIZED_ALIGNED)
DELETE(_ZdlPvRKSt9nothrow_t, DEL_NOTHROW)
DELETE(_ZdaPvRKSt9nothrow_t, DEL_ARRAY_NOTHROW)

/* The exported names, aliases of the functions above: the sampler's own
 * references (the slots it writes, realloc's call of malloc) are to the
 * functions themselves, not to whatever definition of malloc a lookup
 * would find first. */
#define EXPORT_AS(sym, ret, args) EXPORT ret sym args __attribute__((alias("s_" #sym)));
EXPORT_AS(malloc, void *, (size_t))
EXPORT_AS(free, void, (void *))
EXPORT_AS(calloc, void *, (size_t, size_t))
EXPORT_AS(realloc, void *, (void *, size_t))
EXPORT_AS(posix_memalign, int, (void **, size_t, size_t))
EXPORT_AS(aligned_alloc, void *, (size_t, size_t))
EXPORT_AS(memalign, void *, (size_t, size_t))
EXPORT_AS(valloc, void *, (size_t))
EXPORT_AS(pvalloc, void *, (size_t))
#define EXPORT_NEW(sym) EXPORT_AS(sym, void *, (size_t, uintptr_t, uintptr_t))
#define EXPORT_DELETE(sym) EXPORT_AS(sym, void, (void *, uintptr_t, uintptr_t))
EXPORT_NEW(_Znwm)
EXPORT_NEW(_Znam)
EXPORT_NEW(_ZnwmRKSt9nothrow_t)
EXPORT_NEW(_ZnamRKSt9nothrow_t)
EXPORT_NEW(_ZnwmSt11align_val_t)
EXPORT_NEW(_ZnamSt11align_val_t)
EXPORT_NEW(_ZnwmSt11align_val_tRKSt9nothrow_t)
EXPORT_NEW(_ZnamSt11align_val_tRKSt9nothrow_t)
EXPORT_DELETE(_ZdlPv)
EXPORT_DELETE(_ZdaPv)
EXPORT_DELETE(_ZdlPvm)
EXPORT_DELETE(_ZdaPvm)
EXPORT_DELETE(_ZdlPvSt11align_val_t)
EXPORT_DELETE(_ZdaPvSt11align_val_t)
EXPORT_DELETE(_ZdlPvmSt11align_val_t)
EXPORT_DELETE(_ZdaPvmSt11align_val_t)
EXPORT_DELETE(_ZdlPvRKSt9nothrow_t)
EXPORT_DELETE(_ZdaPvRKSt9nothrow_t)

#define E(sym, next) {#sym, (void *)s_##sym, (void **)&(next)}
static const struct entry entries[27] = {
	E(malloc, next_malloc),
	E(free, next_free),
	E(calloc, next_calloc),
	E(realloc, next_realloc),
	E(posix_memalign, next_posix_memalign),
	E(aligned_alloc, next_aligned_alloc),
	E(memalign, next_memalign),
	E(valloc, next_valloc),
	E(pvalloc, next_pvalloc),
	E(_Znwm, next_new[NEW_PLAIN]),
	E(_Znam, next_new[NEW_ARRAY]),
	E(_ZnwmRKSt9nothrow_t, next_new[NEW_NOTHROW]),
	E(_ZnamRKSt9nothrow_t, next_new[NEW_ARRAY_NOTHROW]),
	E(_ZnwmSt11align_val_t, next_new[NEW_ALIGNED]),
	E(_ZnamSt11align_val_t, next_new[NEW_ARRAY_ALIGNED]),
	E(_ZnwmSt11align_val_tRKSt9nothrow_t, next_new[NEW_ALIGNED_NOTHROW]),
	E(_ZnamSt11align_val_tRKSt9nothrow_t, next_new[NEW_ARRAY_ALIGNED_NOTHROW]),
	E(_ZdlPv, next_delete[DEL_PLAIN]),
	E(_ZdaPv, next_delete[DEL_ARRAY]),
	E(_ZdlPvm, next_delete[DEL_SIZED]),
	E(_ZdaPvm, next_delete[DEL_ARRAY_SIZED]),
	E(_ZdlPvSt11align_val_t, next_delete[DEL_ALIGNED]),
	E(_ZdaPvSt11align_val_t, next_delete[DEL_ARRAY_ALIGNED]),
	E(_ZdlPvmSt11align_val_t, next_delete[DEL_SIZED_ALIGNED]),
	E(_ZdaPvmSt11align_val_t, next_delete[DEL_ARRAY_SIZED_ALIGNED]),
	E(_ZdlPvRKSt9nothrow_t, next_delete[DEL_NOTHROW]),
	E(_ZdaPvRKSt9nothrow_t, next_delete[DEL_ARRAY_NOTHROW]),
};

/* ---- Injection: the slots of every module, redirected and put back. ----
 *
 * A module calls the allocator through its GOT: a JUMP_SLOT relocation
 * (its PLT) or a GLOB_DAT one (a call through the GOT, -fno-plt, or the
 * function's address taken). rawstack_attach writes the sampler's entry
 * into every slot that names an entry and holds the next allocator (or
 * a lazy binding's stub in the module itself), remembering what it
 * held; read-only slots (RELRO) are made writable for the store. A
 * module loaded later is done at the next sampled allocation after the
 * dynamic linker announces it (its _dl_debug_state, the debuggers'
 * breakpoint, jumps to dl_changed) or, without that, within a second. */

/* The relocations of a slot that a call goes through. */
#if defined(__x86_64__)
#define R_SLOT R_X86_64_JUMP_SLOT
#define R_DATA R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define R_SLOT R_AARCH64_JUMP_SLOT
#define R_DATA R_AARCH64_GLOB_DAT
#endif

struct saved_slot {
	uintptr_t *slot;
	uintptr_t old;
	uintptr_t hook;
	int ro; /* in its module's RELRO part */
};
#define MAX_SLOTS 8192
static struct saved_slot *saved; /* MAX_SLOTS of them, mmap'd at the first attach */
static size_t nsaved;
static int patch_lock;
static void *canon[27]; /* an entry's canonical PLT address in the main program (fix_canonical) */
static int modules_changed;  /* the dynamic linker announced a change */
static uint64_t scanned_at;  /* when the modules were last looked over */
static unsigned long long scanned_adds, scanned_subs; /* dl_iterate_phdr's counts then */

static uintptr_t page_down(uintptr_t a)
{
	return a & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
}

/* store writes v into the word at slot, making its page writable for
 * the store when it is read-only (ro). */
static int store(uintptr_t *slot, uintptr_t v, int ro)
{
	uintptr_t pg = page_down((uintptr_t)slot);
	long ps = sysconf(_SC_PAGESIZE);
	if (ro && mprotect((void *)pg, (size_t)ps, PROT_READ | PROT_WRITE) != 0)
		return 0;
	__atomic_store_n(slot, v, __ATOMIC_RELEASE);
	if (ro)
		mprotect((void *)pg, (size_t)ps, PROT_READ);
	return 1;
}

static int in_self(uintptr_t a);

/* module describes a loaded module for patching. */
struct module {
	uintptr_t base, lo, hi;     /* load bias, extent of its segments */
	uintptr_t relro_lo, relro_hi; /* read-only after relocation */
};

/* relro says whether slot lies in m's RELRO part. */
static int relro(const struct module *m, uintptr_t slot)
{
	return slot >= m->relro_lo && slot < m->relro_hi;
}

static uintptr_t dyn_ptr(const struct module *m, uintptr_t p)
{
	return p < m->base ? p + m->base : p;
}

/* patch_rela redirects the slots of n relocations at rel. */
static int patch_rela(const struct module *m, const ElfW(Rela) * rel, size_t n, const ElfW(Sym) * syms, const char *strs, size_t strsz)
{
	int done = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned type = (unsigned)ELF64_R_TYPE(rel[i].r_info);
		size_t si = ELF64_R_SYM(rel[i].r_info);
		if ((type != R_SLOT && type != R_DATA) || si == 0)
			continue;
		uint32_t off = syms[si].st_name;
		if (off >= strsz)
			continue;
		const char *name = strs + off;
		if (name[0] != 'm' && name[0] != 'f' && name[0] != 'c' && name[0] != 'r' && name[0] != 'p' && name[0] != 'a' &&
		    name[0] != 'v' && name[0] != '_')
			continue;
		for (size_t e = 0; e < nentries; e++) {
			if (strcmp(name, entries[e].name) != 0)
				continue;
			uintptr_t *slot = (uintptr_t *)(m->base + rel[i].r_offset);
			if (rel[i].r_offset + m->base < m->lo || rel[i].r_offset + m->base + 8 > m->hi)
				break;
			uintptr_t v = __atomic_load_n(slot, __ATOMIC_ACQUIRE), hook = (uintptr_t)entries[e].hook;
			if (v == hook || nsaved >= MAX_SLOTS)
				break;
			void **next = entries[e].next;
			int lazy_stub = v >= m->lo && v < m->hi;
			if (m->base && v < m->hi - m->base)
				break; /* not relocated yet: at the next look */
			if (!lazy_stub && !*next && !in_self(v))
				__atomic_store_n(next, (void *)v, __ATOMIC_RELEASE); /* a C++ operator dlsym did not find */
			if (!lazy_stub && (uintptr_t)*next != v && (uintptr_t)canon[e] != v)
				break; /* another allocator than the program's: leave it */
			if (!*next)
				break;
			int ro = relro(m, (uintptr_t)slot);
			saved[nsaved] = (struct saved_slot){slot, v, hook, ro};
			if (store(slot, hook, ro)) {
				nsaved++;
				done++;
			}
			break;
		}
	}
	return done;
}

/* dyninfo is what patching reads of a module's dynamic section. */
struct dyninfo {
	const ElfW(Sym) * syms;
	const char *strs;
	size_t strsz, njmp, nrela;
	const ElfW(Rela) * jmp, *rela;
};

/* read_dyn reads a loaded module's extent and dynamic section: 0 for a
 * module with none to patch (the vDSO, the sampler itself). */
static int read_dyn(struct dl_phdr_info *info, struct module *m, struct dyninfo *d)
{
	*m = (struct module){.base = info->dlpi_addr, .lo = (uintptr_t)-1};
	*d = (struct dyninfo){0};
	const ElfW(Dyn) *dyn = NULL;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		switch (ph->p_type) {
		case PT_LOAD:
			if (a < m->lo)
				m->lo = a;
			if (a + ph->p_memsz > m->hi)
				m->hi = a + ph->p_memsz;
			break;
		case PT_DYNAMIC:
			dyn = (const ElfW(Dyn) *)a;
			break;
		case PT_GNU_RELRO:
			m->relro_lo = page_down(a);
			m->relro_hi = page_down(a + ph->p_memsz);
			break;
		}
	}
	if (!dyn || m->lo >= m->hi || in_self(m->lo))
		return 0;
	if (info->dlpi_name && strstr(info->dlpi_name, "linux-vdso"))
		return 0;
	int pltrela = 1;
	size_t jmpsz = 0, relasz = 0;
	for (const ElfW(Dyn) *e = dyn; e->d_tag != DT_NULL; e++) {
		switch (e->d_tag) {
		case DT_SYMTAB:
			d->syms = (const ElfW(Sym) *)dyn_ptr(m, e->d_un.d_ptr);
			break;
		case DT_STRTAB:
			d->strs = (const char *)dyn_ptr(m, e->d_un.d_ptr);
			break;
		case DT_STRSZ:
			d->strsz = e->d_un.d_val;
			break;
		case DT_JMPREL:
			d->jmp = (const ElfW(Rela) *)dyn_ptr(m, e->d_un.d_ptr);
			break;
		case DT_PLTRELSZ:
			jmpsz = e->d_un.d_val;
			break;
		case DT_PLTREL:
			pltrela = e->d_un.d_val == DT_RELA;
			break;
		case DT_RELA:
			d->rela = (const ElfW(Rela) *)dyn_ptr(m, e->d_un.d_ptr);
			break;
		case DT_RELASZ:
			relasz = e->d_un.d_val;
			break;
		}
	}
	if (!pltrela)
		d->jmp = NULL;
	d->njmp = jmpsz / sizeof(ElfW(Rela));
	d->nrela = relasz / sizeof(ElfW(Rela));
	return d->syms && d->strs;
}

/* patch_module redirects the slots of one module. */
static int patch_module(struct dl_phdr_info *info)
{
	struct module m;
	struct dyninfo d;
	if (!read_dyn(info, &m, &d))
		return 0;
	int done = 0;
	if (d.jmp)
		done += patch_rela(&m, d.jmp, d.njmp, d.syms, d.strs, d.strsz);
	if (d.rela)
		done += patch_rela(&m, d.rela, d.nrela, d.syms, d.strs, d.strsz);
	return done;
}

/* slot_of returns the value of module d's first slot naming name, 0 if
 * it has none. */
static uintptr_t slot_of(const struct module *m, const struct dyninfo *d, const char *name)
{
	for (int pass = 0; pass < 2; pass++) {
		const ElfW(Rela) *rel = pass ? d->rela : d->jmp;
		size_t n = pass ? d->nrela : d->njmp;
		for (size_t i = 0; rel && i < n; i++) {
			unsigned type = (unsigned)ELF64_R_TYPE(rel[i].r_info);
			size_t si = ELF64_R_SYM(rel[i].r_info);
			if ((type != R_SLOT && type != R_DATA) || si == 0 || d->syms[si].st_name >= d->strsz ||
			    strcmp(d->strs + d->syms[si].st_name, name) != 0)
				continue;
			uintptr_t a = m->base + rel[i].r_offset;
			if (a < m->lo || a + 8 > m->hi)
				return 0;
			return __atomic_load_n((uintptr_t *)a, __ATOMIC_ACQUIRE);
		}
	}
	return 0;
}

/* fix_canonical looks at the main program (the first module): an entry
 * that dlsym found there is its canonical PLT entry (a program built
 * without -fPIE that takes the function's address), which only jumps
 * through the program's own slot, soon the sampler's. The next
 * allocator is what that slot holds, resolved; unresolved, the entry is
 * left alone. */
static int fix_canonical(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size, (void)data;
	struct module m;
	struct dyninfo d;
	if (!read_dyn(info, &m, &d))
		return 1;
	for (size_t e = 0; e < nentries; e++) {
		uintptr_t n = (uintptr_t)*entries[e].next;
		if (n < m.lo || n >= m.hi)
			continue;
		uintptr_t v = slot_of(&m, &d, entries[e].name);
		canon[e] = (void *)n;
		*entries[e].next = v && (v < m.lo || v >= m.hi) ? (void *)v : NULL;
	}
	return 1;
}

static uintptr_t self_lo, self_hi; /* the sampler's own segments */

static int in_self(uintptr_t a)
{
	return a >= self_lo && a < self_hi;
}

static int patch_one(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	*(int *)data += patch_module(info);
	return 0;
}

static int counts(struct dl_phdr_info *info, size_t size, void *data)
{
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
		((unsigned long long *)data)[0] = info->dlpi_adds;
		((unsigned long long *)data)[1] = info->dlpi_subs;
	}
	return 1;
}

/* patch_all redirects the slots of every module (those done already are
 * skipped), under patch_lock; -1 when another thread holds it. */
static int patch_all(void)
{
	int expect = 0;
	if (!__atomic_compare_exchange_n(&patch_lock, &expect, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return -1;
	int saved_in = in_shim;
	in_shim = 1;
	__atomic_store_n(&modules_changed, 0, __ATOMIC_RELAXED);
	unsigned long long c[2] = {0, 0};
	dl_iterate_phdr(counts, c);
	int done = 0;
	dl_iterate_phdr(patch_one, &done);
	scanned_adds = c[0];
	scanned_subs = c[1];
	scanned_at = now_ns();
	in_shim = saved_in;
	__atomic_store_n(&patch_lock, 0, __ATOMIC_RELEASE);
	return done;
}

/* new_modules patches modules loaded since the last look, when the
 * dynamic linker said so or a second has passed (and dl_iterate_phdr's
 * count of loads moved). */
static void new_modules(uint64_t now)
{
	if (!injected)
		return;
	if (!__atomic_load_n(&modules_changed, __ATOMIC_RELAXED)) {
		if (now - scanned_at < 1000000000ull)
			return;
		unsigned long long c[2] = {0, 0};
		dl_iterate_phdr(counts, c);
		if (c[0] == scanned_adds && c[1] == scanned_subs) {
			scanned_at = now;
			return;
		}
	}
	patch_all();
}

/* dl_changed is where the dynamic linker's _dl_debug_state jumps while
 * the sampler is attached: it notes that modules changed (they are not
 * relocated yet when it is told) and returns to the linker. */
static __attribute__((used)) void dl_changed(void)
{
	__atomic_store_n(&modules_changed, 1, __ATOMIC_RELAXED);
}

/* The jump written over _dl_debug_state, and what it held. */
static uint8_t *dl_state;
static uint64_t dl_state_old;

/* jump_insn returns the word to write at at (8-byte aligned) so that it
 * jumps to to, keeping the bytes after the jump, or 0 if it cannot
 * reach. */
static uint64_t jump_insn(const uint8_t *at, uintptr_t to, uint64_t old)
{
#if defined(__x86_64__)
	intptr_t rel = (intptr_t)to - ((intptr_t)at + 5);
	if (rel != (int32_t)rel)
		return 0;
	uint8_t b[8];
	memcpy(b, &old, 8);
	b[0] = 0xe9; /* jmp rel32 */
	int32_t r32 = (int32_t)rel;
	memcpy(b + 1, &r32, 4);
	uint64_t w;
	memcpy(&w, b, 8);
	return w;
#elif defined(__aarch64__)
	intptr_t rel = (intptr_t)to - (intptr_t)at;
	if ((rel & 3) || rel < -(1l << 27) || rel >= (1l << 27))
		return 0;
	uint32_t insn = 0x14000000u | ((uint32_t)(rel >> 2) & 0x3ffffffu); /* b imm26 */
	return (old & ~0xffffffffull) | insn;
#else
	(void)at, (void)to, (void)old;
	return 0;
#endif
}

/* code_store writes the word v at a (code) atomically. */
static int code_store(uint8_t *a, uint64_t v)
{
	uintptr_t pg = page_down((uintptr_t)a);
	size_t len = (size_t)((uintptr_t)a + 8 - pg);
	if (mprotect((void *)pg, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
		return 0;
	__atomic_store_n((uint64_t *)a, v, __ATOMIC_SEQ_CST);
	mprotect((void *)pg, len, PROT_READ | PROT_EXEC);
	__builtin___clear_cache((char *)a, (char *)a + 8);
	return 1;
}

/* hook_loader points the dynamic linker's _dl_debug_state at dl_changed. */
static int hook_loader(void)
{
	if (dl_state)
		return 1;
	struct r_debug *rd = dlsym(RTLD_DEFAULT, "_r_debug");
	if (!rd || !rd->r_brk || (rd->r_brk & 7))
		return 0;
	uint8_t *at = (uint8_t *)rd->r_brk;
	uint64_t old = __atomic_load_n((uint64_t *)at, __ATOMIC_ACQUIRE);
	uint64_t w = jump_insn(at, (uintptr_t)dl_changed, old);
	if (!w || !code_store(at, w))
		return 0;
	dl_state_old = old;
	dl_state = at;
	return 1;
}

/* The recorder's arguments to rawstack_attach, and what it says back. */
struct attach_args {
	uint32_t size; /* sizeof(struct attach_args) */
	uint32_t flags;
	uint64_t rate;
	char ring[1024]; /* the ring file, as this process sees it; "" none */
	/* out */
	int32_t slots;  /* slots redirected */
	int32_t err;    /* ATTACH_ERR_*, 0 */
	int32_t ringed; /* the ring is mapped (else the markers serve) */
	int32_t hooked; /* _dl_debug_state jumps to the sampler */
};
enum { ATTACH_ERR_ARGS = 1, ATTACH_ERR_PRELOADED, ATTACH_ERR_NO_ALLOCATOR, ATTACH_ERR_MEMORY, ATTACH_ERR_BUSY };

/* find_self notes the extent of the sampler's own segments. */
static int find_self(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size, (void)data;
	uintptr_t lo = (uintptr_t)-1, hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		if (a < lo)
			lo = a;
		if (a + ph->p_memsz > hi)
			hi = a + ph->p_memsz;
	}
	if ((uintptr_t)s_malloc >= lo && (uintptr_t)s_malloc < hi) {
		self_lo = lo;
		self_hi = hi;
		return 1;
	}
	return 0;
}

/* rawstack_attach starts an injected sampler: it finds the program's
 * allocator, maps the ring, resets the sampler's state and redirects the
 * slots of every loaded module. Called by the recorder through ptrace,
 * on a thread it stopped outside the allocator and the dynamic linker
 * (dlsym and dl_iterate_phdr take the linker's locks). */
EXPORT int rawstack_attach(struct attach_args *a)
{
	if (!a || a->size != sizeof(*a))
		return -ATTACH_ERR_ARGS;
	a->slots = a->ringed = a->hooked = 0;
	a->err = 0;
	if (!injected) {
		a->err = ATTACH_ERR_PRELOADED;
		return -a->err;
	}
	if (__atomic_load_n(&patch_lock, __ATOMIC_ACQUIRE) || __atomic_load_n(&state, __ATOMIC_ACQUIRE) == DETACHING) {
		a->err = ATTACH_ERR_BUSY;
		return -a->err;
	}
	in_shim = 1;
	if (!self_hi)
		dl_iterate_phdr(find_self, NULL);
	for (size_t i = 0; i < nentries; i++)
		if (!*entries[i].next)
			*entries[i].next = dlsym(RTLD_DEFAULT, entries[i].name);
	dl_iterate_phdr(fix_canonical, NULL);
	if (!next_malloc || !next_free || in_self((uintptr_t)next_malloc)) {
		in_shim = 0;
		a->err = ATTACH_ERR_NO_ALLOCATOR;
		return -a->err;
	}
	if (!saved) {
		void *m = mmap(NULL, MAX_SLOTS * sizeof(struct saved_slot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			in_shim = 0;
			a->err = ATTACH_ERR_MEMORY;
			return -a->err;
		}
		saved = m;
		pthread_atfork(NULL, NULL, child_after_fork);
	}
	/* A fresh start (an earlier attach may have left its state). */
	rate = a->rate ? (unsigned long)a->rate : 512 * 1024;
	lock = 0;
	seq = 0;
	queued = 0;
	tab = NULL;
	for (unsigned i = 0; i < ntables; i++)
		munmap(tables[i], table_bytes(tables[i]->bits));
	ntables = 0;
	memset(filter, 0, sizeof(filter));
	my_pid = (uint32_t)getpid();
	ring = beat = NULL;
	a->ring[sizeof(a->ring) - 1] = 0;
	ring_open(a->ring);
	a->ringed = ring != NULL;
	__atomic_store_n(&state, ATTACHED, __ATOMIC_RELEASE);
	a->hooked = hook_loader();
	int n = patch_all();
	a->slots = n < 0 ? 0 : n;
	in_shim = 0;
	return a->slots;
}

/* inert stops sampling for good (until another attach): the set is
 * forgotten (frees find an empty filter), and the ring's pages and the
 * set's are replaced by empty anonymous memory, so that the program's
 * memory is what it was, and a thread still inside writes into nothing
 * that matters. why goes into the ring for the recorder (DETACH_SILENT),
 * 0 for none. */
static void inert(uint32_t why)
{
	int expect = ATTACHED;
	if (!__atomic_compare_exchange_n(&state, &expect, DETACHING, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	memset(filter, 0, sizeof(filter));
	__atomic_store_n(&ring, NULL, __ATOMIC_RELEASE);
	struct ring_hdr *r = __atomic_exchange_n(&beat, NULL, __ATOMIC_ACQ_REL);
	int saved_errno = errno;
	if (r) {
		if (why)
			__atomic_store_n(&r->detached, why, __ATOMIC_RELEASE);
		mmap(r, RING_HDR + ring_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	}
	for (unsigned i = 0; i < ntables; i++)
		mmap(tables[i], table_bytes(tables[i]->bits), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	errno = saved_errno;
	__atomic_store_n(&state, DETACHED, __ATOMIC_RELEASE);
}

/* active says whether a sampled allocation is to be reported: the
 * sampler is attached and its recorder is there. With a ring, it looks
 * at the recorder's stamp (a sampled allocation reads the clock anyway)
 * and goes inert when the recorder left or went silent; an injected
 * sampler also patches the modules loaded since. */
static int active(void)
{
	if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != ATTACHED)
		return 0;
	struct ring_hdr *r = __atomic_load_n(&beat, __ATOMIC_ACQUIRE);
	if (!r && !injected)
		return 1;
	uint64_t now = now_ns();
	if (r) {
		uint32_t d = __atomic_load_n(&r->detached, __ATOMIC_ACQUIRE);
		uint64_t alive = __atomic_load_n(&r->alive, __ATOMIC_ACQUIRE);
		if (d || (alive && now > alive && now - alive > ALIVE_NS)) {
			inert(d ? 0 : DETACH_SILENT);
			return 0;
		}
	}
	if (!in_shim) {
		in_shim = 1;
		new_modules(now);
		in_shim = 0;
	}
	return 1;
}

/* rawstack_detach ends an injected sampler at a clean detach: inert,
 * every slot still pointing here back to what it held, and
 * _dl_debug_state as it was. It takes no lock another thread could hold
 * (the recorder calls it on whatever thread it stopped): a slot of a
 * module unloaded since is left alone, and -ATTACH_ERR_BUSY says a
 * thread was patching (the recorder tries again). */
EXPORT int rawstack_detach(void)
{
	int expect = 0;
	if (!__atomic_compare_exchange_n(&patch_lock, &expect, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return -ATTACH_ERR_BUSY;
	inert(0);
	if (dl_state) {
		code_store(dl_state, dl_state_old);
		dl_state = NULL;
	}
	int n = 0;
	for (size_t i = 0; i < nsaved; i++) {
		struct saved_slot *s = &saved[i];
		Dl_info di;
		/* Still loaded (dladdr finds its module), still ours. */
		if (!dladdr(s->slot, &di) || __atomic_load_n(s->slot, __ATOMIC_ACQUIRE) != s->hook)
			continue;
		n += store(s->slot, s->old, s->ro);
	}
	nsaved = 0;
	__atomic_store_n(&patch_lock, 0, __ATOMIC_RELEASE);
	return n;
}
