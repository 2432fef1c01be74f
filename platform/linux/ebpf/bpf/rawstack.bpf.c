// SPDX-License-Identifier: GPL-2.0
/* rawstack's BPF programs: sample stacks of every (or selected) process
 * on CPU from per-CPU perf events, and off CPU from the scheduler. Each
 * sample goes to one ring buffer as a record of this layout (all fields
 * little endian, see ebpf_linux.go's decoder):
 *
 *	struct rs_hdr  (48 bytes)
 *	u64 regs[NREGS] user registers in perf order, valid if RS_REGS:
 *	                x86-64: ax bx cx dx si di bp sp ip r8-r15 (17);
 *	                arm64: x0-x30 sp pc (33);
 *	                with RS_GREGS instead, only sp and the Go g register
 *	                (r14, x28), the others 0
 *	u64 kernel[nkernel]  kernel return addresses, leaf first
 *	u64 user[nuser]      user frames: the kernel's frame-pointer walk (in
 *	                     stack-copy mode too, where it continues the walk
 *	                     of the copy past a Go stack switch)
 *	u8  stack[stack]     user stack from regs.sp up (stack-copy mode only)
 *	u64 py[3 * npy]      Python frames (hdr.pad = npy), leaf first: code
 *	                     object, instruction pointer (or f_lasti in its
 *	                     low 32 bits), owner byte | is_entry byte << 8
 *
 * except RS_ONCPU, RS_ALLOC_RET and RS_FREE records, which are the header
 * alone.
 *
 * One source builds the object of each architecture (build.sh defines
 * __TARGET_ARCH_x86 or __TARGET_ARCH_arm64); what differs between them
 * is in the macros below the includes and in types.h's struct pt_regs.
 *
 * Licensed GPL-2.0 because the helpers it calls are GPL-only. */
#include "types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define MAX_KERNEL 127      /* frames, as kernel.perf_event_max_stack */
#define MAX_USER_PCS 127    /* frame-pointer mode */
#define MAX_STACK 16384     /* bytes of user stack, stack-copy mode */
#define PAGE 4096

/* The architectures' user registers: arguments and return value at a
 * function's entry and return (uprobes), the stack pointer, the Go g
 * register, the return address at a function's first instruction, and
 * the registers a record carries, in the order of perf's
 * sample_regs_user (arch.PerfRegsMask), with the indexes of sp and g. */
#if defined(__TARGET_ARCH_x86)
#define NREGS 17
#define ARG1(r) ((r)->di)
#define ARG2(r) ((r)->si)
#define ARG3(r) ((r)->dx)
#define ARG4(r) ((r)->cx)
#define RETVAL(r) ((r)->ax)
#define USER_SP(r) ((r)->sp)
#define GO_G(r) ((r)->r14)
#define SP_IDX 7
#define G_IDX 15
/* A call pushed it: the word at the stack pointer. */
static __always_inline __u64 entry_ra(struct pt_regs *r)
{
	__u64 ret = 0;
	bpf_probe_read_user(&ret, sizeof(ret), (void *)r->sp);
	return ret;
}
/* The context's registers into r (each field a CO-RE access). */
#define COPY_REGS(r, c) do { \
	(r).ax = (c)->ax; (r).bx = (c)->bx; (r).cx = (c)->cx; (r).dx = (c)->dx; \
	(r).si = (c)->si; (r).di = (c)->di; (r).bp = (c)->bp; (r).sp = (c)->sp; \
	(r).ip = (c)->ip; (r).r8 = (c)->r8; (r).r9 = (c)->r9; (r).r10 = (c)->r10; \
	(r).r11 = (c)->r11; (r).r12 = (c)->r12; (r).r13 = (c)->r13; (r).r14 = (c)->r14; \
	(r).r15 = (c)->r15; } while (0)
#define PERF_REGS(out, r) do { \
	(out)[0] = (r).ax; (out)[1] = (r).bx; (out)[2] = (r).cx; (out)[3] = (r).dx; \
	(out)[4] = (r).si; (out)[5] = (r).di; (out)[6] = (r).bp; (out)[7] = (r).sp; \
	(out)[8] = (r).ip; (out)[9] = (r).r8; (out)[10] = (r).r9; (out)[11] = (r).r10; \
	(out)[12] = (r).r11; (out)[13] = (r).r12; (out)[14] = (r).r13; (out)[15] = (r).r14; \
	(out)[16] = (r).r15; } while (0)
#elif defined(__TARGET_ARCH_arm64)
#define NREGS 33
#define ARG1(r) ((r)->regs[0])
#define ARG2(r) ((r)->regs[1])
#define ARG3(r) ((r)->regs[2])
#define ARG4(r) ((r)->regs[3])
#define RETVAL(r) ((r)->regs[0])
#define USER_SP(r) ((r)->sp)
#define GO_G(r) ((r)->regs[28])
#define SP_IDX 31
#define G_IDX 28
/* A call (bl) left it in the link register, x30. */
static __always_inline __u64 entry_ra(struct pt_regs *r)
{
	return r->regs[30];
}
#define COPY_REGS(r, c) do { \
	for (int i_ = 0; i_ < 31; i_++) \
		(r).regs[i_] = (c)->regs[i_]; \
	(r).sp = (c)->sp; (r).pc = (c)->pc; } while (0)
/* perf's arm64 order is x0-x30, sp, pc (DWARF's numbers too). */
#define PERF_REGS(out, r) do { \
	for (int i_ = 0; i_ < 31; i_++) \
		(out)[i_] = (r).regs[i_]; \
	(out)[31] = (r).sp; (out)[32] = (r).pc; } while (0)
#else
#error "define __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif

enum { RS_CPU = 1, RS_OFFCPU = 2, RS_ONCPU = 3, RS_ALLOC = 4, RS_ALLOC_RET = 5, RS_FREE = 6 };
enum { RS_REGS = 1, RS_STACK_FAULT = 2, RS_PY = 4, RS_PY_GIL = 8, RS_PY_CUT = 16, RS_GREGS = 32 };
#define MAX_PY 64           /* Python frames read per sample */
#define PY_FRAME 128        /* bytes of an interpreter frame read, at most */
#define NO_OFF 0xffffffffu
enum { LOST_RING = 0, LOST_OFFSTART = 1, LOST_ALLOC = 2, LOST_NSTATS = 3 };

struct rs_hdr {
	__u32 kind;
	__u32 pid;
	__u32 tid;
	__u32 cpu;
	__u64 time;
	__u64 weight;
	__u16 nkernel;
	__u16 nuser;
	__u16 flags;
	__u16 pad;
	__u32 stack;
	__u32 pad2;
};

#define REGS_OFF sizeof(struct rs_hdr)
#define KERNEL_OFF (REGS_OFF + NREGS * 8)
#define STACK_MAX_OFF (KERNEL_OFF + MAX_KERNEL * 8 + MAX_USER_PCS * 8 + MAX_STACK)
#define SCRATCH (STACK_MAX_OFF + PAGE)

/* Set by the loader before the programs are loaded. */
const volatile __u32 all_procs = 0;     /* sample every process */
const volatile __u32 copy_stack = 1;    /* 1: registers + stack copy; 0: frame pointers */
const volatile __u32 stack_bytes = 8192; /* bytes of user stack to copy, <= MAX_STACK */
const volatile __u32 go_regs = 0;       /* frame-pointer mode: record sp and the g register (RS_GREGS) */
const volatile __u32 self_tgid = 0;     /* the recorder: never sampled off CPU */
const volatile __u64 offcpu_min_ns = 0; /* shorter off-CPU intervals are not reported */
/* Wake the reader only once this many bytes wait in the ring buffer (0:
 * on every record written into an empty ring, the kernel's default). The
 * reader also reads on its own every few tens of milliseconds, so records
 * are read in batches: a wakeup per sample costs the recorder a context
 * switch and its runtime's scheduler a round each. */
const volatile __u64 wakeup_bytes = 0;
/* Mean bytes between two sampled allocations (0: allocations are not
 * recorded; the allocator's uprobes are then not attached either). */
const volatile __u64 alloc_rate = 0;
/* Read CPython threads' Python frames at the sample (py_procs). */
const volatile __u32 python = 0;
/* Wake the reader at the first sample of a process it has not been woken
 * for (seen), whatever wakeup_bytes says: a whole-host recorder reads the
 * ring about once a second, and reads a new process's attributes from
 * /proc at its first sample, which must come before the process exits. */
const volatile __u32 wake_new = 0;
/* Wake the reader at a sample of a process in jit_procs, at most once in
 * jit_wake_ns across the host (0: never). The reader names such a
 * process's JavaScript frames from V8's heap as it is when the sample is
 * read, and V8 replaces optimized code within a second. */
const volatile __u64 jit_wake_ns = 0;

/* Set by the recorder once it has reported the processes that exist, so
 * that no sample waits in the ring buffer meanwhile. */
volatile __u32 running = 0;

struct scratch {
	__u8 buf[SCRATCH];
	__u64 busy; /* alloc_scratch: a program of this CPU is filling buf */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

/* The allocator programs' own scratch buffer. They run in the task's
 * context with migration, not preemption, disabled: the cpu-clock
 * program (from the timer interrupt) and the sched_switch one (when the
 * task is preempted) can run in the middle of them on the same CPU, and
 * must not write over the record they are building. Between two
 * allocator programs (a thread preempted inside one, another of the
 * process calling malloc on the same CPU) busy keeps the second out; it
 * is then counted lost. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} alloc_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 21); /* the loader sets the size */
} events SEC(".maps");

/* Processes to sample (thread group ids), when not all_procs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

/* Thread id -> time it went off CPU. A plain hash, not an LRU one: an
 * LRU map may evict an entry of a thread that is still off CPU (its
 * free lists are per CPU), and the thread's off-CPU sample was then lost
 * without a trace. Entries go when the thread comes back or exits
 * (on_exit); an update that finds the map full counts as lost. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} offstart SEC(".maps");

/* Samples dropped, per reason. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOST_NSTATS);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* Allocations. A sampled call's size (and posix_memalign's out pointer)
 * from its entry to its return, by thread. */
struct alloc_call {
	__u64 size;
	__u64 memptr;
	__u64 time;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct alloc_call);
} alloc_calls SEC(".maps");

/* Sampled blocks not freed yet: their frees are reported, no other.
 * Not preallocated: its memory follows the live sampled blocks (about
 * 100 bytes each), up to 2^20 of them (10^6 live sampled blocks: at the
 * default rate, half a terabyte of heap); a block that finds it full is
 * counted lost. The recorder keeps nothing per block. */
struct live_key {
	__u32 tgid;
	__u32 pad;
	__u64 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct live_key);
	__type(value, __u64);
} live SEC(".maps");

/* CPython processes whose threads' Python frames the cpu-clock program
 * reads at the sample (platform/linux/cpython's Walk): where the runtime
 * state is, and the offsets of the version. The recorder adds a process
 * when it finds its interpreter. */
struct py_proc {
	__u64 runtime;
	__u32 interps_head, threads_head, ts_next;
	__u32 rt_gil, interp_gil;
	__u32 ts_frame, cframe_frame, ts_tid;
	__u32 fr_code, fr_instr, fr_previous, fr_owner, fr_is_entry, fr_size;
	__u32 gil_holder, gil_locked;
	__u32 legacy, pthread_tid;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

/* A thread's state and its interpreter's GIL, found by walking the
 * thread lists, by thread id; checked at each sample (the state must
 * still name the thread). */
struct py_thread {
	__u64 tstate;
	__u64 gil;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct py_thread);
} py_threads SEC(".maps");

/* Processes whose first sample woke the reader (wake_new). An entry goes
 * when its process exits; one evicted costs one more wakeup. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} seen SEC(".maps");

/* Processes whose samples wake the reader (jit_wake_ns), put by the
 * reader when it finds V8 in one; an entry goes when its process exits or
 * execs. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} jit_procs SEC(".maps");

/* When a jit_procs sample last woke the reader (bpf_ktime_get_ns). CPUs
 * race on it at worst into one more wakeup. */
volatile __u64 jit_woke = 0;

/* Bytes left until the next sampled byte, per CPU (0: draw one). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} alloc_left SEC(".maps");

static __always_inline bool selected(__u32 tgid)
{
	if (all_procs)
		return true;
	return bpf_map_lookup_elem(&targets, &tgid) != 0;
}

static __always_inline void count_lost(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&lost, &reason);
	if (n)
		*n += 1;
}

/* wakeup returns the ring buffer flags for a record of size bytes. */
static __always_inline __u64 wakeup(__u64 size)
{
	if (!wakeup_bytes)
		return 0;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) + size >= wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

#define PY_MAX_THREADS 32

/* py_tid returns the thread id thread state ts names, 0 if unreadable. */
static __always_inline __u64 py_tid(struct py_proc *pp, __u64 ts)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, 8, (void *)(ts + pp->ts_tid)) != 0)
		return 0;
	if (pp->legacy) { /* a pthread_t: glibc's struct pthread holds the tid */
		__u32 t = 0;
		if (bpf_probe_read_user(&t, 4, (void *)(v + pp->pthread_tid)) != 0)
			return 0;
		v = t;
	}
	return v;
}

/* py_find walks the first interpreter's thread list (the main
 * interpreter, in a process without subinterpreters) for tid's thread
 * state, at most PY_MAX_THREADS of them (each thread state walked costs
 * the verifier as much as a frame read). A thread it does not find has
 * its frames read by the recorder, which then puts its state in
 * py_threads. */
static __always_inline int py_find(struct py_proc *pp, __u32 tid, struct py_thread *out)
{
	__u64 interp = 0, ts = 0;
	if (bpf_probe_read_user(&interp, 8, (void *)(pp->runtime + pp->interps_head)) != 0 || !interp)
		return -1;
	if (bpf_probe_read_user(&ts, 8, (void *)(interp + pp->threads_head)) != 0)
		return -1;
	for (int i = 0; i < PY_MAX_THREADS && ts; i++) {
		if (py_tid(pp, ts) == tid) {
			out->tstate = ts;
			out->gil = 0;
			if (pp->rt_gil != NO_OFF)
				out->gil = pp->runtime + pp->rt_gil;
			else if (pp->interp_gil != NO_OFF)
				bpf_probe_read_user(&out->gil, 8, (void *)(interp + pp->interp_gil));
			return 0;
		}
		__u64 next = 0;
		if (bpf_probe_read_user(&next, 8, (void *)(ts + pp->ts_next)) != 0)
			return -1;
		ts = next;
	}
	return -1;
}

/* ns_tid returns the current thread's id in its own pid namespace, the
 * one its interpreter records (native_thread_id): a container numbers its
 * threads from 1, the host's id (h->tid) is another. */
static __always_inline __u32 ns_tid(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pid *p = BPF_CORE_READ(task, thread_pid);
	unsigned int level = BPF_CORE_READ(p, level);
	if (level > 32)
		return 0;
	int nr = 0;
	__u64 at = (__u64)p + bpf_core_field_offset(struct pid, numbers) + level * bpf_core_type_size(struct upid) +
		   bpf_core_field_offset(struct upid, nr);
	if (bpf_probe_read_kernel(&nr, sizeof(nr), (void *)at) != 0)
		return 0;
	return nr;
}

/* py_read appends, at s->buf + off, the Python frames of the current
 * thread, if its process is a CPython the recorder told the program of,
 * and returns the bytes appended; h->pad gets their count and h->flags
 * RS_PY (frames read here), RS_PY_GIL (the thread held the GIL) and
 * RS_PY_CUT (more frames than MAX_PY). */
static __always_inline __u64 py_read(struct scratch *s, struct rs_hdr *h, __u64 off)
{
	struct py_proc *pp = bpf_map_lookup_elem(&py_procs, &h->pid);
	if (!pp)
		return 0;
	struct py_thread th = {};
	struct py_thread *c = bpf_map_lookup_elem(&py_threads, &h->tid);
	__u32 tid = ns_tid();
	if (c && py_tid(pp, c->tstate) == tid) {
		th = *c;
	} else {
		if (py_find(pp, tid, &th) != 0)
			return 0;
		bpf_map_update_elem(&py_threads, &h->tid, &th, BPF_ANY);
	}
	__u64 ts = th.tstate;
	__u64 frame = 0;
	if (bpf_probe_read_user(&frame, 8, (void *)(ts + pp->ts_frame)) != 0)
		return 0;
	if (pp->cframe_frame != NO_OFF && frame &&
	    bpf_probe_read_user(&frame, 8, (void *)(frame + pp->cframe_frame)) != 0)
		return 0;
	if (off > STACK_MAX_OFF)
		return 0;
	__u32 size = pp->fr_size;
	if (size == 0 || size > PY_FRAME)
		return 0;
	h->flags |= RS_PY;
	if (th.gil) {
		__u64 holder = 0;
		__u32 locked = 0;
		if (bpf_probe_read_user(&holder, 8, (void *)(th.gil + pp->gil_holder)) == 0 &&
		    bpf_probe_read_user(&locked, 4, (void *)(th.gil + pp->gil_locked)) == 0 &&
		    holder == ts && locked == 1)
			h->flags |= RS_PY_GIL;
	}
	/* The frame is read past the frames written so far (PAGE of slack
	 * follows the largest record). */
	__u64 tmp = off + MAX_PY * 24;
	/* Bounded again where the verifier sees it: clang folds the check
	 * into the one on off above, and older verifiers (Linux 6.1) lose
	 * that bound through the spills of the loop below. */
	barrier_var(tmp);
	if (tmp > STACK_MAX_OFF + MAX_PY * 24)
		return 0;
	__u32 n = 0;
	for (int i = 0; i < MAX_PY; i++) {
		if (!frame)
			break;
		__u8 *fb = s->buf + tmp;
		if (bpf_probe_read_user(fb, size & (PY_FRAME - 1) ? size & (PY_FRAME - 1) : PY_FRAME, (void *)frame) != 0)
			break;
		/* No branches here (they multiply the verifier's work by the
		 * iterations): the owner and is_entry bytes go out as read
		 * (offsets that do not apply point at a harmless byte), and
		 * the recorder, which knows the version, reads them. */
		__u64 o = off + n * 24;
		barrier_var(o);
		if (o > STACK_MAX_OFF + (MAX_PY - 1) * 24)
			break;
		__u64 *out = (__u64 *)(s->buf + o);
		out[0] = *(__u64 *)(fb + (pp->fr_code & (PY_FRAME - 8)));
		out[1] = *(__u64 *)(fb + (pp->fr_instr & (PY_FRAME - 4)));
		out[2] = (__u64)fb[pp->fr_owner & (PY_FRAME - 1)] | (__u64)fb[pp->fr_is_entry & (PY_FRAME - 1)] << 8;
		frame = *(__u64 *)(fb + (pp->fr_previous & (PY_FRAME - 8)));
		n++;
	}
	if (frame && n == MAX_PY)
		h->flags |= RS_PY_CUT;
	h->pad = n;
	return n * 24;
}

/* emit captures the current thread's kernel and user stack into the
 * per-CPU scratch buffer and copies the used part to the ring buffer. ctx
 * is the program's context (perf event registers or tracepoint arguments): bpf_get_stack
 * takes the kernel stack from it and the user part from the registers the
 * thread entered the kernel with. */
/* entry_sp, when not 0, says the thread is at the first instruction of
 * a function (a uprobe on its entry), with its stack pointer: the
 * function has not saved its return address in a frame record yet (it
 * is at the stack pointer on x86-64, in the link register on arm64), so
 * the frame-pointer walk, which starts from the caller's frame pointer,
 * would skip the caller; it is put back after the leaf. ctx is then the
 * user's registers (a uprobe's context): the registers are read from
 * it, and there is no kernel stack to walk. */
static __always_inline int emit_in(struct scratch *s, void *ctx, __u32 kind, __u64 weight, __u64 now, __u32 skip, __u64 entry_sp)
{
	struct rs_hdr *h = (struct rs_hdr *)s->buf;
	__u64 id = bpf_get_current_pid_tgid();
	struct task_struct *task = bpf_get_current_task_btf();

	h->kind = kind;
	h->pid = id >> 32;
	h->tid = (__u32)id;
	h->cpu = bpf_get_smp_processor_id();
	h->time = now;
	h->weight = weight;
	h->nkernel = 0;
	h->nuser = 0;
	h->flags = 0;
	h->pad = 0;
	h->stack = 0;
	h->pad2 = 0;

	long n = 0;
	if (!entry_sp)
		n = bpf_get_stack(ctx, s->buf + KERNEL_OFF, MAX_KERNEL * 8, skip & 0xff);
	if (n < 0)
		n = 0;
	if (n > MAX_KERNEL * 8)
		n = MAX_KERNEL * 8;
	n &= ~7L;
	h->nkernel = n / 8;
	__u64 off = KERNEL_OFF + n;

	__u64 *regs = (__u64 *)(s->buf + REGS_OFF);
	bool user = h->pid != 0 && !(BPF_CORE_READ(task, flags) & PF_KTHREAD) && BPF_CORE_READ(task, mm);
	if (user && !copy_stack && entry_sp) {
		/* Recent x86 kernels (6.18 here) know a uprobe at a
		 * function's entry and put its return address second in the
		 * walk themselves: then the walk is whole. */
		__u64 ret = entry_ra(ctx);
		long u = bpf_get_stack(ctx, s->buf + off, MAX_USER_PCS * 8, BPF_F_USER_STACK);
		if (u < 0)
			u = 0;
		if (u > MAX_USER_PCS * 8)
			u = MAX_USER_PCS * 8;
		u &= ~7L;
		if (u < 16 || *(__u64 *)(s->buf + off + 8) != ret) {
			/* Else: leaf, its return address, then the walk
			 * from the caller's frame pointer (its first PC, the
			 * leaf again, is overwritten). */
			u = bpf_get_stack(ctx, s->buf + off + 8, (MAX_USER_PCS - 1) * 8, BPF_F_USER_STACK);
			if (u < 0)
				u = 0;
			if (u > (MAX_USER_PCS - 1) * 8)
				u = (MAX_USER_PCS - 1) * 8;
			u &= ~7L;
			if (u >= 8) {
				*(__u64 *)(s->buf + off) = *(__u64 *)(s->buf + off + 8);
				*(__u64 *)(s->buf + off + 8) = ret;
				u += 8;
			}
		}
		h->nuser = u / 8;
		off += u;
	} else if (user && !copy_stack) {
		long u = bpf_get_stack(ctx, s->buf + off, MAX_USER_PCS * 8, BPF_F_USER_STACK);
		if (u < 0)
			u = 0;
		if (u > MAX_USER_PCS * 8)
			u = MAX_USER_PCS * 8;
		u &= ~7L;
		h->nuser = u / 8;
		off += u;
	} else if (user) {
		struct pt_regs r;
		int got_regs = 0;
		if (entry_sp) {
			struct pt_regs *c = ctx;
			COPY_REGS(r, c);
			got_regs = 1;
		} else {
			struct pt_regs *pr = (struct pt_regs *)bpf_task_pt_regs(task);
			got_regs = bpf_probe_read_kernel(&r, sizeof(r), pr) == 0;
		}
		if (got_regs) {
			/* The frame-pointer walk as well: where a walk of the
			 * copy needs memory it does not hold, at a frame that
			 * keeps a frame pointer (a Go stack switch leaves the
			 * goroutine's stack outside a copy of the g0 stack),
			 * the recorder goes on with it. */
			if (!entry_sp) {
				long u = bpf_get_stack(ctx, s->buf + off, MAX_USER_PCS * 8, BPF_F_USER_STACK);
				if (u < 0)
					u = 0;
				if (u > MAX_USER_PCS * 8)
					u = MAX_USER_PCS * 8;
				u &= ~7L;
				h->nuser = u / 8;
				off += u;
			}
			h->flags |= RS_REGS;
			PERF_REGS(regs, r);
			/* Copy the stack page by page, so that a window reaching past
			 * the top of the stack keeps what lies below the top. */
			__u64 sp = USER_SP(&r);
			__u32 want = stack_bytes;
			if (want > MAX_STACK)
				want = MAX_STACK;
			/* The main thread has no frame above the stack
			 * pointer it started with (what lies there is argv,
			 * the environment and the auxiliary vector): the
			 * window stops there, which keeps a shallow stack's
			 * record small. */
			__u64 top = BPF_CORE_READ(task, mm, start_stack);
			if (sp < top && top - sp < want)
				want = top - sp;
			__u32 got = 0;
			for (int i = 0; i < MAX_STACK / PAGE + 1; i++) {
				if (got >= want)
					break;
				__u64 addr = sp + got;
				__u64 chunk = PAGE - (addr & (PAGE - 1));
				if (chunk > want - got)
					chunk = want - got;
				/* Masks the verifier can follow: 1 <= chunk <= PAGE. */
				barrier_var(chunk);
				chunk &= 2 * PAGE - 1;
				if (chunk == 0 || chunk > PAGE)
					break;
				__u64 dst = off + got;
				if (dst > STACK_MAX_OFF)
					break;
				if (bpf_probe_read_user(s->buf + dst, chunk, (void *)addr) != 0) {
					h->flags |= RS_STACK_FAULT;
					break;
				}
				got += chunk;
			}
			h->stack = got;
			off += got;
		}
	}
	if (!(h->flags & RS_REGS)) {
		__builtin_memset(regs, 0, NREGS * 8);
		if (user && go_regs) {
			/* The goroutine of a Go program's sample: its g register
			 * and stack pointer, as the thread left user space. */
			struct pt_regs *pr = entry_sp ? (struct pt_regs *)ctx : (struct pt_regs *)bpf_task_pt_regs(task);
			__u64 sp = 0, g = 0;
			if (bpf_probe_read_kernel(&sp, sizeof(sp), &USER_SP(pr)) == 0 &&
			    bpf_probe_read_kernel(&g, sizeof(g), &GO_G(pr)) == 0) {
				regs[SP_IDX] = sp;
				regs[G_IDX] = g;
				h->flags |= RS_GREGS;
			}
		}
	}
	if (python && user && kind == RS_CPU)
		off += py_read(s, h, off);
	if (off > SCRATCH)
		off = SCRATCH;
	__u64 flags = wakeup(off);
	if (wake_new && kind == RS_CPU) {
		__u32 tgid = id >> 32;
		if (!bpf_map_lookup_elem(&seen, &tgid)) {
			__u8 one = 1;
			bpf_map_update_elem(&seen, &tgid, &one, BPF_ANY);
			flags = BPF_RB_FORCE_WAKEUP;
		}
	}
	if (jit_wake_ns && kind == RS_CPU && flags != BPF_RB_FORCE_WAKEUP) {
		__u32 tgid = id >> 32;
		if (bpf_map_lookup_elem(&jit_procs, &tgid)) {
			__u64 now = bpf_ktime_get_ns();
			if (now - jit_woke >= jit_wake_ns) {
				jit_woke = now;
				flags = BPF_RB_FORCE_WAKEUP;
			}
		}
	}
	if (bpf_ringbuf_output(&events, s->buf, off, flags) != 0)
		count_lost(LOST_RING);
	return 0;
}

/* log2(1 + (i + 0.5) / 256) in 16.16 fixed point. */
static const __u16 log2_frac[256] = {
	184, 552, 919, 1284, 1648, 2010, 2371, 2730, 3088, 3445, 3801, 4155,
	4507, 4859, 5209, 5558, 5906, 6252, 6597, 6941, 7283, 7625, 7965, 8304,
	8641, 8978, 9313, 9647, 9980, 10312, 10642, 10972, 11300, 11627, 11953, 12278,
	12602, 12925, 13246, 13567, 13886, 14205, 14522, 14838, 15153, 15467, 15781, 16093,
	16404, 16714, 17023, 17331, 17637, 17943, 18248, 18552, 18856, 19158, 19459, 19759,
	20058, 20356, 20654, 20950, 21245, 21540, 21834, 22126, 22418, 22709, 22999, 23288,
	23577, 23864, 24150, 24436, 24721, 25005, 25288, 25570, 25852, 26132, 26412, 26691,
	26969, 27246, 27523, 27798, 28073, 28347, 28620, 28893, 29164, 29435, 29706, 29975,
	30244, 30511, 30778, 31045, 31310, 31575, 31839, 32103, 32365, 32627, 32888, 33149,
	33409, 33668, 33926, 34184, 34441, 34697, 34952, 35207, 35461, 35715, 35968, 36220,
	36471, 36722, 36972, 37222, 37470, 37719, 37966, 38213, 38459, 38705, 38950, 39194,
	39438, 39681, 39923, 40165, 40406, 40647, 40887, 41126, 41365, 41603, 41841, 42077,
	42314, 42550, 42785, 43019, 43253, 43487, 43720, 43952, 44184, 44415, 44646, 44876,
	45105, 45334, 45562, 45790, 46018, 46244, 46471, 46696, 46921, 47146, 47370, 47593,
	47816, 48039, 48261, 48482, 48703, 48924, 49143, 49363, 49582, 49800, 50018, 50235,
	50452, 50668, 50884, 51100, 51315, 51529, 51743, 51956, 52169, 52382, 52594, 52805,
	53016, 53227, 53437, 53647, 53856, 54064, 54273, 54481, 54688, 54895, 55101, 55307,
	55513, 55718, 55922, 56127, 56330, 56534, 56737, 56939, 57141, 57343, 57544, 57745,
	57945, 58145, 58344, 58543, 58742, 58940, 59138, 59335, 59532, 59729, 59925, 60121,
	60316, 60511, 60706, 60900, 61094, 61287, 61480, 61672, 61865, 62056, 62248, 62439,
	62629, 62820, 63010, 63199, 63388, 63577, 63765, 63953, 64141, 64328, 64515, 64701,
	64887, 65073, 65259, 65444,
};

/* exp_interval draws the bytes to the next sampled byte: exponential with
 * mean alloc_rate, as -ln(U) * alloc_rate with U uniform in (0, 1], the
 * logarithm from the position of U's top bit and a table of the next 8
 * bits (relative error of the mean below 0.1%). */
static __always_inline __u64 exp_interval(void)
{
	__u32 u = bpf_get_prandom_u32() | 1;
	__u32 k = 0, x = u;
	if (x >= 1u << 16) { k += 16; x >>= 16; }
	if (x >= 1u << 8) { k += 8; x >>= 8; }
	if (x >= 1u << 4) { k += 4; x >>= 4; }
	if (x >= 1u << 2) { k += 2; x >>= 2; }
	if (x >= 1u << 1) { k += 1; }
	__u32 m = k >= 8 ? u >> (k - 8) : u << (8 - k);
	m &= 0xff;
	/* -log2(u / 2^32) in 16.16, then times ln 2 (45426 / 2^16). */
	__u64 l = ((__u64)(32 - k) << 16) - log2_frac[m];
	return (((alloc_rate * l) >> 16) * 45426) >> 16;
}

/* alloc_sampled says whether an allocation of size bytes holds the next
 * sampled byte: a Poisson process over the bytes allocated on this CPU,
 * so an allocation of s bytes is sampled with probability
 * 1 - exp(-s / alloc_rate), whatever came before (the reader unbiases by
 * that probability). */
static __always_inline bool alloc_sampled(__u64 size)
{
	__u32 zero = 0;
	__u64 *left = bpf_map_lookup_elem(&alloc_left, &zero);
	if (!left)
		return false;
	if (*left == 0)
		*left = exp_interval();
	if (*left > size) {
		*left -= size;
		return false;
	}
	*left = exp_interval();
	return true;
}

/* emit_small writes a header-only record of the current thread. */
static __always_inline void emit_small(__u32 kind, __u64 time, __u64 weight)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct rs_hdr h = {
		.kind = kind,
		.pid = id >> 32,
		.tid = (__u32)id,
		.cpu = bpf_get_smp_processor_id(),
		.time = time,
		.weight = weight,
	};
	if (bpf_ringbuf_output(&events, &h, sizeof(h), wakeup(sizeof(h))) != 0)
		count_lost(LOST_RING);
}

/* alloc_enter samples an allocation call of size bytes: when sampled,
 * its stack (read at the allocator's entry, so the caller's frame is
 * whole) goes out at once as an RS_ALLOC record with the size, and the
 * call waits in alloc_calls for its return. memptr is posix_memalign's
 * out pointer, 0 for the others. */
static __always_inline int alloc_enter(struct pt_regs *ctx, __u64 size, __u64 memptr)
{
	if (!running || !alloc_rate)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	if (!selected(id >> 32) || !alloc_sampled(size))
		return 0;
	__u32 tid = (__u32)id, zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&alloc_scratch, &zero);
	if (!s)
		return 0;
	if (s->busy) {
		count_lost(LOST_ALLOC);
		return 0;
	}
	s->busy = 1;
	struct alloc_call c = { .size = size, .memptr = memptr, .time = bpf_ktime_get_ns() };
	if (bpf_map_update_elem(&alloc_calls, &tid, &c, BPF_ANY) != 0)
		count_lost(LOST_ALLOC);
	else
		emit_in(s, ctx, RS_ALLOC, size, c.time, 0, USER_SP(ctx));
	s->busy = 0;
	return 0;
}

SEC("uprobe")
int malloc_enter(struct pt_regs *ctx)
{
	return alloc_enter(ctx, ARG1(ctx), 0);
}

SEC("uprobe")
int calloc_enter(struct pt_regs *ctx)
{
	return alloc_enter(ctx, ARG1(ctx) * ARG2(ctx), 0);
}

/* aligned_alloc(alignment, size) */
SEC("uprobe")
int aligned_alloc_enter(struct pt_regs *ctx)
{
	return alloc_enter(ctx, ARG2(ctx), 0);
}

/* posix_memalign(void **memptr, size_t alignment, size_t size) */
SEC("uprobe")
int posix_memalign_enter(struct pt_regs *ctx)
{
	__u64 memptr = ARG1(ctx);
	return alloc_enter(ctx, ARG3(ctx), memptr ? memptr : 1);
}

/* free_block reports the free of a sampled block of the current process. */
static __always_inline void free_block(__u64 addr)
{
	if (!addr)
		return;
	struct live_key k = { .tgid = bpf_get_current_pid_tgid() >> 32, .addr = addr };
	if (bpf_map_delete_elem(&live, &k) == 0)
		emit_small(RS_FREE, bpf_ktime_get_ns(), addr);
}

SEC("uprobe")
int free_enter(struct pt_regs *ctx)
{
	if (alloc_rate)
		free_block(ARG1(ctx));
	return 0;
}

/* realloc(ptr, size) frees ptr and allocates size bytes. glibc's
 * realloc(NULL, size) calls malloc, whose own probe samples it. */
SEC("uprobe")
int realloc_enter(struct pt_regs *ctx)
{
	if (!alloc_rate)
		return 0;
	__u64 ptr = ARG1(ctx), size = ARG2(ctx);
	if (!ptr)
		return 0;
	free_block(ptr);
	if (size == 0)
		return 0;
	return alloc_enter(ctx, size, 0);
}

/* The return of every allocator function: a sampled call's block goes
 * into live and out as an RS_ALLOC_RET record (stamped with the call's
 * time, after its RS_ALLOC in the ring) with its address; 0 when the
 * call failed or live is full (then the sample is counted lost). */
SEC("uretprobe")
int alloc_return(struct pt_regs *ctx)
{
	if (!alloc_rate)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct alloc_call *c = bpf_map_lookup_elem(&alloc_calls, &tid);
	if (!c)
		return 0;
	__u64 addr = RETVAL(ctx), size = c->size, time = c->time, memptr = c->memptr;
	bpf_map_delete_elem(&alloc_calls, &tid);
	if (memptr) { /* posix_memalign: 0 on success, the block in *memptr */
		__u64 rc = addr;
		addr = 0;
		if (rc == 0 && memptr != 1)
			bpf_probe_read_user(&addr, sizeof(addr), (void *)memptr);
	}
	if (addr) {
		struct live_key k = { .tgid = id >> 32, .addr = addr };
		if (bpf_map_update_elem(&live, &k, &size, BPF_ANY) != 0) {
			count_lost(LOST_ALLOC);
			addr = 0;
		}
	}
	emit_small(RS_ALLOC_RET, time, addr);
	return 0;
}

/* The allocation sampler preloaded into launched programs
 * (platform/linux/allocshim) samples by bytes itself, with the same
 * Poisson process as alloc_sampled, and calls
 * rawstack_alloc_sampled(block, size, frees, n) for a sampled allocation
 * only: its stack goes out as an RS_ALLOC record and, the block being
 * known already, its RS_ALLOC_RET at once. A block of 0 says the
 * sampler's set of sampled blocks was full: the sample is lost. The
 * sampler keeps the sampled blocks itself and queues their frees, with
 * their time and thread, instead of trapping for each: the queue (frees,
 * n <= SHIM_FREE_MAX) comes with the next sampled allocation, and goes
 * out before it, or alone through rawstack_free_sampled(frees, n) when it
 * is full or old. live is not used. */
#define SHIM_FREE_MAX 32 /* allocshim/src/shim.c FREE_MAX */

struct shim_free_rec {
	__u64 block;
	__u64 time;
	__u32 tid;
	__u32 pad;
};

static __always_inline void shim_frees(__u64 frees, __u64 n)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	__u32 cpu = bpf_get_smp_processor_id();
	for (int i = 0; i < SHIM_FREE_MAX; i++) {
		if (i >= n)
			break;
		struct shim_free_rec f;
		if (bpf_probe_read_user(&f, sizeof(f), (void *)(frees + i * sizeof(f))) != 0)
			break;
		if (!f.block)
			continue;
		struct rs_hdr h = {
			.kind = RS_FREE,
			.pid = pid,
			.tid = f.tid,
			.cpu = cpu,
			.time = f.time,
			.weight = f.block,
		};
		if (bpf_ringbuf_output(&events, &h, sizeof(h), wakeup(sizeof(h))) != 0)
			count_lost(LOST_RING);
	}
}

SEC("uprobe")
int shim_alloc(struct pt_regs *ctx)
{
	if (!running || !alloc_rate)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	if (!selected(id >> 32))
		return 0;
	if (ARG3(ctx) && ARG4(ctx))
		shim_frees(ARG3(ctx), ARG4(ctx));
	__u64 addr = ARG1(ctx), size = ARG2(ctx);
	if (!addr) {
		count_lost(LOST_ALLOC);
		return 0;
	}
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&alloc_scratch, &zero);
	if (!s)
		return 0;
	if (s->busy) {
		count_lost(LOST_ALLOC);
		return 0;
	}
	s->busy = 1;
	__u64 now = bpf_ktime_get_ns();
	emit_in(s, ctx, RS_ALLOC, size, now, 0, USER_SP(ctx));
	s->busy = 0;
	emit_small(RS_ALLOC_RET, now, addr);
	return 0;
}

SEC("uprobe")
int shim_free(struct pt_regs *ctx)
{
	if (!running || !alloc_rate || !ARG1(ctx))
		return 0;
	if (!selected(bpf_get_current_pid_tgid() >> 32))
		return 0;
	shim_frees(ARG1(ctx), ARG2(ctx));
	return 0;
}

static __always_inline int emit(void *ctx, __u32 kind, __u64 weight, __u64 now, __u32 skip)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	return emit_in(s, ctx, kind, weight, now, skip, 0);
}

/* On CPU: one per-CPU cpu-clock perf event in frequency mode. Returning 0
 * keeps the kernel from writing a perf sample too; the event's own ring
 * buffer only carries mmap, comm, fork and exit records. */
SEC("perf_event")
int on_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!running || !selected(id >> 32))
		return 0;
	emit(ctx, RS_CPU, ctx->sample_period, bpf_ktime_get_ns(), 0);
	return 0;
}

/* Off CPU. When a selected thread leaves the CPU, its stack (kernel
 * and user, read in its own context) goes to the ring buffer at once, as
 * an RS_OFFCPU record stamped with the time; when it comes back, a short
 * RS_ONCPU record gives the time it left again and the time it is back.
 * The recorder pairs them: an off-CPU sample weighted by the difference.
 * Only the scheduler's tracepoint is needed (no kprobe on an internal
 * function, which many kernels lack or rename). */
SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	if (!running)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u32 tgid = prev->tgid, tid = prev->pid;
	if (tid != 0 && tgid != self_tgid && !(prev->flags & PF_KTHREAD) && selected(tgid)) {
		/* Skip this program's frame and bpf_trace_run4's: the stack
		 * starts in __schedule. */
		if (bpf_map_update_elem(&offstart, &tid, &now, BPF_ANY) == 0)
			emit(ctx, RS_OFFCPU, 0, now, 2);
		else
			count_lost(LOST_OFFSTART);
	}
	__u32 ntid = next->pid;
	__u64 *start = bpf_map_lookup_elem(&offstart, &ntid);
	if (!start)
		return 0;
	__u64 t0 = *start;
	bpf_map_delete_elem(&offstart, &ntid);
	if (now <= t0 || now - t0 < offcpu_min_ns)
		return 0;
	struct rs_hdr h = {
		.kind = RS_ONCPU,
		.pid = next->tgid,
		.tid = ntid,
		.cpu = bpf_get_smp_processor_id(),
		.time = t0,
		.weight = now - t0,
	};
	if (bpf_ringbuf_output(&events, &h, sizeof(h), wakeup(sizeof(h))) != 0)
		count_lost(LOST_RING);
	return 0;
}

/* A selected process's children are selected too. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	if (all_procs)
		return 0;
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	if (ptgid == ctgid || !bpf_map_lookup_elem(&targets, &ptgid))
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *task)
{
	__u32 tid = task->pid, tgid = task->tgid;
	bpf_map_delete_elem(&offstart, &tid);
	if (tid == tgid && !all_procs)
		bpf_map_delete_elem(&targets, &tgid);
	if (tid == tgid && wake_new)
		bpf_map_delete_elem(&seen, &tgid);
	if (tid == tgid && jit_wake_ns)
		bpf_map_delete_elem(&jit_procs, &tgid);
	return 0;
}

/* An exec makes the process a new program, whose attributes the reader
 * reads again: its next sample wakes the reader as a first one does
 * (wake_new; attached only then), and the reader puts it in jit_procs
 * again if the new program runs V8. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, __s32 old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;
	bpf_map_delete_elem(&seen, &tgid);
	bpf_map_delete_elem(&jit_procs, &tgid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
