// SPDX-License-Identifier: GPL-2.0
/* rawstack's BPF programs: sample stacks of every (or selected) process
 * on CPU from per-CPU perf events, and off CPU from the scheduler. Each
 * sample goes to one ring buffer as a record of this layout (all fields
 * little endian, see ebpf_linux.go's decoder):
 *
 *	struct rs_hdr  (48 bytes)
 *	u64 regs[17]   user registers in perf order (ax bx cx dx si di bp sp ip r8-r15), valid if RS_REGS
 *	u64 kernel[nkernel]  kernel return addresses, leaf first
 *	u64 user[nuser]      user frames (frame-pointer mode only)
 *	u8  stack[stack]     user stack from regs.sp up (stack-copy mode only)
 *
 * except RS_ONCPU records, which are the header alone.
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
#define NREGS 17

enum { RS_CPU = 1, RS_OFFCPU = 2, RS_ONCPU = 3 };
enum { RS_REGS = 1, RS_STACK_FAULT = 2 };
enum { LOST_RING = 0, LOST_OFFSTART = 1, LOST_NSTATS = 2 };

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
#define SCRATCH (KERNEL_OFF + MAX_KERNEL * 8 + MAX_STACK + PAGE)

/* Set by the loader before the programs are loaded. */
const volatile __u32 all_procs = 0;     /* sample every process */
const volatile __u32 copy_stack = 1;    /* 1: registers + stack copy; 0: frame pointers */
const volatile __u32 stack_bytes = 8192; /* bytes of user stack to copy, <= MAX_STACK */
const volatile __u32 self_tgid = 0;     /* the recorder: never sampled off CPU */
const volatile __u64 offcpu_min_ns = 0; /* shorter off-CPU intervals are not reported */
/* Wake the reader only once this many bytes wait in the ring buffer (0:
 * on every record written into an empty ring, the kernel's default). The
 * reader also reads on its own every few tens of milliseconds, so records
 * are read in batches: a wakeup per sample costs the recorder a context
 * switch and its runtime's scheduler a round each. */
const volatile __u64 wakeup_bytes = 0;

/* Set by the recorder once it has reported the processes that exist, so
 * that no sample waits in the ring buffer meanwhile. */
volatile __u32 running = 0;

struct scratch {
	__u8 buf[SCRATCH];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

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

/* emit captures the current thread's kernel and user stack into the
 * per-CPU scratch buffer and copies the used part to the ring buffer. ctx
 * is the program's context (perf event registers or tracepoint arguments): bpf_get_stack
 * takes the kernel stack from it and the user part from the registers the
 * thread entered the kernel with. */
static __always_inline int emit(void *ctx, __u32 kind, __u64 weight, __u64 now, __u32 skip)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
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

	long n = bpf_get_stack(ctx, s->buf + KERNEL_OFF, MAX_KERNEL * 8, skip & 0xff);
	if (n < 0)
		n = 0;
	if (n > MAX_KERNEL * 8)
		n = MAX_KERNEL * 8;
	n &= ~7L;
	h->nkernel = n / 8;
	__u64 off = KERNEL_OFF + n;

	__u64 *regs = (__u64 *)(s->buf + REGS_OFF);
	bool user = h->pid != 0 && !(BPF_CORE_READ(task, flags) & PF_KTHREAD) && BPF_CORE_READ(task, mm);
	if (user && !copy_stack) {
		long u = bpf_get_stack(ctx, s->buf + off, MAX_USER_PCS * 8, BPF_F_USER_STACK);
		if (u < 0)
			u = 0;
		if (u > MAX_USER_PCS * 8)
			u = MAX_USER_PCS * 8;
		u &= ~7L;
		h->nuser = u / 8;
		off += u;
	} else if (user) {
		struct pt_regs *pr = (struct pt_regs *)bpf_task_pt_regs(task);
		struct pt_regs r;
		if (bpf_probe_read_kernel(&r, sizeof(r), pr) == 0) {
			h->flags |= RS_REGS;
			regs[0] = r.ax; regs[1] = r.bx; regs[2] = r.cx; regs[3] = r.dx;
			regs[4] = r.si; regs[5] = r.di; regs[6] = r.bp; regs[7] = r.sp;
			regs[8] = r.ip; regs[9] = r.r8; regs[10] = r.r9; regs[11] = r.r10;
			regs[12] = r.r11; regs[13] = r.r12; regs[14] = r.r13; regs[15] = r.r14;
			regs[16] = r.r15;
			/* Copy the stack page by page, so that a window reaching past
			 * the top of the stack keeps what lies below the top. */
			__u64 sp = r.sp;
			__u32 want = stack_bytes;
			if (want > MAX_STACK)
				want = MAX_STACK;
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
				if (dst > KERNEL_OFF + MAX_KERNEL * 8 + MAX_STACK)
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
	if (!(h->flags & RS_REGS))
		__builtin_memset(regs, 0, NREGS * 8);
	if (off > SCRATCH)
		off = SCRATCH;
	if (bpf_ringbuf_output(&events, s->buf, off, wakeup(off)) != 0)
		count_lost(LOST_RING);
	return 0;
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
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
