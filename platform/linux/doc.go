// Package linux is rawstack's Linux back end: [Open] and [Launch] start
// a [Session] that samples a process (the caller itself, a running PID or
// a command it launches), or with the eBPF back end every process of the
// host, and reports threads, modules and call chains to a
// [platform.Handler]. They dispatch on [platform.Config] Backend:
//
//   - BackendPerf (the default): package platform/linux/perf, with
//     perf_event_open;
//   - BackendEBPF: package platform/linux/ebpf, BPF programs loaded with
//     cilium/ebpf. That package registers itself when a program imports
//     it; without it the eBPF back end reports that it is not linked in
//     ([BPFLinked], [ProbeBPF]), and the program does not link
//     cilium/ebpf (the rawstack command runs rawstack-ebpf for it).
//
// The packages below it; imports point down or sideways, never up (ebpf
// reaches the entry through tracking.RegisterEBPF, not by importing it):
//
//	platform/linux            Open, Launch, Probe, ProbeBPF: the entry
//	├── perf                  the perf_event back end's Session
//	├── ebpf                  the eBPF back end's Session, its BPF loader, bpf/ (C and object)
//	├── tracking              what both share: process/thread/module tracking, perf rings and records, the online unwinder, Run
//	├── jit                   the JIT tracker (perf maps, jitdump)
//	├── goruntime             the goroutine reader (goroutine id and pprof labels of a Go sample)
//	├── cpython               the Python frame reader (a CPython thread's frames, read at each sample)
//	├── procfs                /proc and /proc/PID/maps
//	└── internal/linuxtest    the tests' shared handlers and raw capture
//
// How each back end samples, and the measurements behind its choices, is
// in the documentation of its package.
//
// On other systems every entry point returns an error wrapping
// platform.ErrNotSupported, and so does the eBPF back end on
// architectures other than x86-64.
package linux
