/* Minimal kernel definitions for rawstack's BPF programs: only what they
 * use, with preserve_access_index so that every field access is a CO-RE
 * relocation the loader resolves against the running kernel's BTF. Struct
 * layouts here are therefore not tied to one kernel; only field names and
 * types matter. A hand-written header (instead of a 3 MB vmlinux.h dump of
 * one kernel) keeps the build reproducible on any machine. */
#ifndef RAWSTACK_TYPES_H
#define RAWSTACK_TYPES_H

typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

#define BPF_ANY 0
#define BPF_F_NO_PREALLOC (1U << 0)
#define BPF_F_USER_STACK (1ULL << 8)
/* bpf_ringbuf_output flags and bpf_ringbuf_query's (include/uapi/linux/bpf.h). */
#define BPF_RB_NO_WAKEUP (1ULL << 0)
#define BPF_RB_FORCE_WAKEUP (1ULL << 1)
#define BPF_RB_AVAIL_DATA 0
#define PF_KTHREAD 0x00200000

#if defined(__TARGET_ARCH_x86)
/* x86-64 struct pt_regs (arch/x86/include/asm/ptrace.h). */
struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
} __attribute__((preserve_access_index));
#elif defined(__TARGET_ARCH_arm64)
/* arm64's struct pt_regs (arch/arm64/include/asm/ptrace.h) begins with
 * struct user_pt_regs (uapi asm/ptrace.h), an ABI: a uprobe's context,
 * bpf_task_pt_regs and the perf_event context's regs (bpf_user_pt_regs_t)
 * are read through this prefix, at fixed offsets. */
struct pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
#endif

/* The perf_event program context (uapi linux/bpf_perf_event.h, regs
 * being the architecture's bpf_user_pt_regs_t); the verifier rewrites
 * its accesses, so no CO-RE here. */
struct bpf_perf_event_data {
	struct pt_regs regs;
	__u64 sample_period;
	__u64 addr;
};

struct mm_struct {
	unsigned long start_stack; /* the main thread's first stack pointer (argc) */
} __attribute__((preserve_access_index));

/* A thread's id in each pid namespace it is in, numbers[0] the host's
 * and numbers[level] its own (include/linux/pid.h). */
struct upid {
	int nr;
} __attribute__((preserve_access_index));

struct pid {
	unsigned int level;
	struct upid numbers[1];
} __attribute__((preserve_access_index));

struct task_struct {
	unsigned int flags;
	int pid;
	int tgid;
	struct mm_struct *mm;
	struct pid *thread_pid;
} __attribute__((preserve_access_index));

#endif
