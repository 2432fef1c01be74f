// Package ebpf is rawstack's eBPF back end on Linux: the BPF programs
// (bpf/rawstack.bpf.c, compiled by bpf/build.sh into the object embedded
// here; `go generate` rebuilds it, CI checks it is current), loaded and
// attached with github.com/cilium/ebpf, and the host side that reads
// what they record: a [Session] of its own, which reports through the
// same [platform.Handler] path as the perf back end (package
// platform/linux/perf) with the process, thread and module tracking and
// the unwinder both share (package platform/linux/tracking). Importing
// it, for its effect, enables [platform.BackendEBPF] in package tracer
// and in platform/linux's Open and Launch:
//
//	import _ "github.com/rawstack/rawstack/platform/linux/ebpf"
//
// It is a package of its own, reached through a registration
// (tracking.RegisterEBPF, from its init), so that programs that do not
// sample with eBPF (the rawstack command among them; `rawstack record
// --backend ebpf` runs the rawstack-ebpf command) do not link
// cilium/ebpf and pay its package initialisation at start-up. x86-64
// only; elsewhere [Open], [Launch] and [Probe] return an error wrapping
// platform.ErrNotSupported.
//
// # What the programs record
//
// One cpu-clock perf event per CPU, in frequency mode, runs the on_cpu program
// for every process (System) or for the target and its descendants (a BPF
// hash map, extended at fork by a sched_process_fork program). The program
// writes pid, tid, CPU, time, the kernel stack (bpf_get_stack) and the
// user stack into one BPF ring buffer; it returns 0 so that the kernel
// writes no perf sample, and the same events' small perf rings carry the
// MMAP2, COMM, FORK and EXIT records that the perf back end's module and
// thread tracking reads (mappings and build ids through /proc/PID/root).
// The reader ([Session.ReadAll]) merges both by time and reports through
// the same path as the perf back end. It needs CAP_BPF and CAP_PERFMON
// (or CAP_SYS_ADMIN) and a kernel with BTF; [Probe] says which is
// missing.
//
// User stacks without frame pointers: the program copies the user
// registers (bpf_task_pt_regs) and a window of the user stack from the
// stack pointer up (StackSize, 8 KiB by default, at most 16 KiB; copied
// page by page so that a window reaching past the top of the stack keeps
// what lies below it), and the reader unwinds it with package arch's CFI
// engine exactly as DWARF mode does. The alternative, the OpenTelemetry
// profiler's, walks per-module tables derived from .eh_frame inside BPF;
// it moves only addresses, but must extract and load tables for every
// executable on the host into BPF maps (that profiler's maps are where
// its hundreds of MB go) and fit each walk in the verifier's limits. The
// measurements that decided (this machine, 2 vCPUs shared with other
// jobs; TestBPFBytesPerSample, TestEBPFChain, benchmarks -run ebpf):
//
//   - bytes per sample through the ring: 225-250 with the kernel's
//     frame-pointer walk (--unwind fp), 1.4-5.7 KB with an 8 KiB window
//     (less than 8 KiB because the copy stops at the top of the stack);
//     at 100 Hz on 2 CPUs that is at most 1.2 MB/s, nothing for a ring
//     buffer.
//
//   - completeness: a C program built with -fomit-frame-pointer keeps
//     main → a → … → leaf in 561 of 561 samples with the window and 0 of
//     506 with the frame-pointer walk.
//
//   - cost, whole host at 100 Hz against perf record -a -g (benchmarks
//     -run ebpf, 11 interleaved rounds, median pair ratios). At a machine
//     load of 5-14 (other jobs): recorder CPU 0.81x perf's with the window
//     (230 vs 282 ms), 0.76x with --unwind fp; the workload's slowdown is
//     perf's within 3%. At a load of 13-19 made of busy loops and a
//     stream of Go binaries copied to new paths and run (a host running
//     go test): 0.94x with the window, 0.82x with --unwind fp. Peak RSS
//     (VmHWM of rawstack and rawstack-ebpf together) 28.5-29.1 MiB
//     against perf's 12.6-12.8 MiB. BPF memory: 4.1 MiB (the 4 MiB ring,
//     43 KiB of per-CPU scratch), 5.3 MiB with --off-cpu. With --off-cpu
//     against perf recording sched_switch as well: 1.01x at load 5-14,
//     1.21x at 13-19 (every new process has off-CPU stacks to unwind).
//
//     What made the window's cost perf's: the reader parks in Go's
//     network poller (a goroutine blocked in poll(2) kept the runtime's
//     sysmon thread polling every 20 µs: a third of the recorder's CPU);
//     the BPF programs wake it only when a quarter of the ring is used
//     and it reads every 100 ms otherwise (a wakeup per sample before);
//     the ring is read in place, not copied out; tables are lazy (libc's
//     first touch: 0.45 ms instead of 8.3 ms, and a Go binary's
//     .debug_frame 5.5 ms instead of 33), shared by build id and
//     forgotten with the last process that maps their file; perf maps
//     are watched from a process's first sample, not for every process of
//     the host, and looked for less and less often while missing; the
//     clock is read through the vDSO. Before, at loads of 20-35, the
//     recorder used 1.5-4.8x perf's CPU. Per sample, once its modules'
//     tables are warm, the host work (decode, unwind, report) is 250-310
//     ns for 8 frames (BenchmarkBPFRecord).
//
// So the window: complete chains for any code with CFI, no per-host table
// pipeline, no BPF map memory beyond the ring (4 MiB; with System and
// on-CPU samples only, a quarter second of every CPU's largest records,
// 256 KiB to 4 MiB) and a per-CPU scratch buffer; the price is unwinding
// on the host, with tables that are slices of the module files mapped
// read-only (only the pages lookups touch are resident). With System set, a
// sample the reader reaches more than half a second late makes no new
// tables (it is unwound with those made, frame pointers elsewhere);
// samples more than two seconds late are dropped and reported
// (LostUnwind); a full ring is reported as LostRingOverflow and a full
// map of threads off CPU as LostUnknown, from BPF counters read at every
// read, and a record the decoder rejects counts as lost too. A reader
// that gets too little CPU on an oversubscribed host loses samples that
// way. At a load of about 30 (busy loops and a stream of new binaries)
// an 8 s -a recording kept 1330-1545 of about 1600 samples with none
// lost; the build before the changes above kept 912-1487 under the same
// load, with up to 40 lost (the 981 lost at a load of 32 made by other
// jobs, measured earlier, was not reproduced by artificial load).
//
// A whole-host session (System) reads its ring once a second, and at
// once when the first sample of a process arrives (its attributes are
// read from /proc while it lives) or a quarter of the ring is used. A
// sample of a process that runs V8 wakes it too, at most once every 100
// ms across the host (the jit_procs map, which the reader fills as it
// finds V8): the reader names JavaScript frames from V8's heap as the heap
// is when it reads the sample, and V8 replaces optimized code within a
// second. A recording of one process reads every 10 ms while it names JIT
// frames.
//
// Off-CPU time (Config.OffCPU) needs only the sched_switch tracepoint
// (tp_btf), not a kprobe (many kernels, this one among them, have no
// kprobes, and finish_task_switch is often renamed): when a selected
// thread leaves the CPU, its kernel and user stack are captured in its
// own context and written at once; when it comes back, a 48-byte record
// gives the time it left. The reader holds the unwound stack per thread
// and reports one sample flagged format.SampleOffCPU, stamped with the
// time the thread left, weighted by the nanoseconds it was away. With
// System set this copies a stack at every context switch of the host.
//
// # Python frames
//
// The cpu-clock program reads a CPython thread's Python frames at the
// sample, as the perf back end cannot (it reads them when it drains the
// sample, milliseconds later, which for calls that short puts the read
// in a later call). Once the recorder has found a process's interpreter
// (platform/linux/cpython), it puts in the py_procs map where its
// _PyRuntime is and the field offsets of its version (cpython.Walk). At
// a sample of one of its threads the program finds the thread's state
// (its py_threads cache, checked at each sample against the state's
// thread id, or the main interpreter's thread list, up to 32 states; the
// recorder puts in the cache the state of a thread it had to read
// itself), reads the GIL's locked and last_holder, then up to 64
// frames: for each its code object's address, instruction pointer
// (f_lasti before 3.11) and owner and is_entry bytes, 24 bytes a frame
// appended to the record, with no branch in the loop. The loops cost the
// verifier: loading the programs takes about 0.2 s more CPU with them
// (0.23 s of system time against 0.05 at a load of 6; none with
// --no-python, whose loader drops them). The
// recorder validates and interns the code objects (cpython.Reader's
// FramesRaw) as for frames it reads itself. A sample the program could
// not read (the process not yet known to it: up to one read period after
// the interpreter is mapped) is read from user space if the reader gets
// to it within 5 ms, and otherwise keeps its native stack only:
// TestRecordPythonPerf holds the shares of three functions of 1–3 ms
// calls to perf's with -X perf on the same process.
//
// # Allocations
//
// With Config.Alloc, a launched command gets the allocation sampler of
// package allocshim preloaded (LD_PRELOAD, first in the list, with
// RAWSTACK_ALLOC_RATE): it passes every allocator call to the next
// allocator (glibc's, jemalloc's, tcmalloc's, an LD_PRELOADed one) and
// draws per thread, with the Poisson process below, whether the call
// holds the next sampled byte. When samples copy the stack (DWARF or
// auto unwinding), the session also creates a shared ring
// (allocshim.Ring, a file in the sampler's private directory named by
// RAWSTACK_ALLOC_RING): a sampled allocation then never enters the
// kernel. The sampler takes the registers at rawstack_capture's entry
// and copies the stack above them, up to the thread's stack top and the
// session's stack size, into the ring as the record shim_alloc would
// have written, followed by its block's; each free of a sampled block
// goes into the ring at once, before the block returns to the
// allocator. The session reads that ring with the BPF ring buffer and
// the perf rings, merged by time (the sampler stamps its records with
// CLOCK_MONOTONIC under the ring's lock, so the ring is in time order),
// every 20 ms, every 2 ms while an eighth of it is in use at a read.
// The ring's pages are made when it is created, and each process maps
// them all at its first sample (MADV_POPULATE_WRITE), not a fault per
// page. The markers below serve what the ring cannot: frame-pointer
// sessions (the BPF programs walk the frames), a process that cannot
// open the ring file (run as another user) or runs in another pid
// namespace (its pids are not the recorder's), a thread whose stack the
// sampler does not know, and a record that finds the ring full or its
// lock held 50 ms (by a stopped thread). A full ring means the recorder
// has not kept up, starved of CPU by the program's threads: the trap
// then slows the program to the recorder's pace rather than losing the
// record (a program of 4 threads that allocate 4 KiB blocks flat out
// lost 0 of 16,574 samples at --alloc-rate 256 KiB on 2 CPUs, where
// the markers alone lost 7,057 of 20,706 to the BPF ring). Otherwise a
// sampled allocation calls
// rawstack_alloc_sampled(block, size, frees, n), where shim_alloc copies
// the stack into the ring and writes the block at once; the sampler
// keeps its sampled blocks and queues their frees (block, time, thread)
// without a trap: the queue rides on the next sampled allocation, whose
// program writes one free record each ahead of the allocation, or goes
// alone through rawstack_free_sampled(frees, n) (shim_free) when 32 are
// queued, a free finds the oldest 5 ms old or the program exits. Those two
// uprobes go on the sampler's file for every
// process that maps it; the programs keep the selected ones, so the
// command's children are recorded too. The markers are a 5-byte nop, so
// that a kernel that optimizes such uprobes (6.18 here) enters through a
// trampoline and a system call instead of a breakpoint trap.
//
// A running process (Open) gets the same sampler by injection
// (allocshim.Inject, after the process and its modules are reported):
// its markers probed first, the ring made where the process's mount
// namespace sees it and chowned to its user, and at the end of Run (and
// in Close) a clean detach: the ring says the recorder left and
// rawstack_detach puts the slots back; the records written until then
// are read after. Every read stamps the ring: a sampler whose recorder
// was killed goes inert by itself. The stacks of sampled allocations are
// cut at the sampler's entry: the frames of the module with the
// sampler's build id above it are not reported. All of this but the
// markers' uprobes is package tracking's (alloc_linux.go), which the
// perf back end records allocations with too.
//
// Where injection cannot be (Stats.AllocFallback says why) and for the
// whole host (System), uprobes (the kernel's uprobe PMU, through
// cilium/ebpf's link.OpenExecutable) go on the allocator the target
// calls, for that process only (its children are not probed): the library among
// libjemalloc, libtcmalloc and libc.so.6 that its /proc/PID/maps shows
// (the host's libc.so.6 with System). malloc, calloc, realloc,
// posix_memalign and aligned_alloc get a program at entry and one at
// return, free one at entry. The entry program draws whether the call
// holds the next sampled byte (bytes between samples are exponential
// with mean AllocRate, drawn per CPU as -ln U times the rate, U's
// logarithm from its top bit and a table of the next 8 bits), and for a
// sampled call copies the stack at the allocator's entry, where the
// caller's frame is still whole, into the ring; the return program puts
// the block into a BPF hash map and writes its address. Only frees of
// blocks in that map reach the ring.
//
// Either way a statically linked binary is refused with an
// [AllocatorError] naming it, and the host unwinds the stack as a CPU
// sample's and reports the allocation, weighted by size/p and 1/p with
// p = 1-exp(-size/AllocRate), to the handler's [platform.AllocHandler];
// [Session.Stats] says which way (platform.AllocPreloadRing,
// platform.AllocPreload or platform.AllocUprobes).
//
// Costs: the recorder keeps nothing per live block (the sampler's set,
// in the target, holds up to 2^21; the BPF map, not preallocated, up to
// 2^20). Under uprobes each probed call is a trap into the kernel —
// malloc two, free one: the benchmarks' alloc scenario (malloc, memset
// and free of 16-4111 bytes, about 80 ns a round unprofiled) measured
// 72-192x slowdowns of its loop, heaptrack's LD_PRELOAD interposition
// 11-15x. Preloaded, an unsampled call costs the sampler a countdown (a
// look-up in a 1 KiB counting filter for free) and a jump (2-4% of the
// CPU time of that loop); a sampled one the uprobe's trampoline and
// system call and shim_alloc, 1.04 us a run here (2 vCPUs shared with
// other jobs): its stack copy stops at the main thread's first stack
// pointer (mm->start_stack; nothing above is a frame) and it reads the
// registers from its context. The free of a sampled block costs a
// queued record and no trap. The loop, sampled 45 000 times a second,
// took 1.12x its unprofiled time through the markers (load 0.8-2.7),
// of which the trampoline's system call alone was about 0.06 (a
// shim_alloc that returned at once still cost 1.087x); through the
// shared ring, with no entry into the kernel, 1.05-1.06x (load 0.9-1.8). Uprobes are
// perf events owned by the recorder's file descriptors, so a recorder
// killed by SIGKILL leaves none behind.
package ebpf
