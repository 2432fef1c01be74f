// Package windows is rawstack's Windows back end: it samples the threads
// of a process — the caller itself, a running PID or a command it
// launches — by suspending each thread, reading its context and copying
// its stack from the stack pointer up, resuming it, and then unwinding the
// copy with the images' x64 unwind data (arch/winunwind; frame pointers
// where a PC is in no image). Modules are tracked with their CodeView
// (RSDS) identity and code id: in-process through
// LdrRegisterDllNotification, registered before the initial enumeration
// so no load is missed, and out-of-process by polling the loader list.
//
// While any thread is suspended nothing allocates and no lock is taken: a
// suspended thread may hold the heap lock, the loader lock or a lock of
// the Go runtime. The suspend–context–copy–resume window therefore runs on
// a native thread the Go runtime does not know (window_windows_amd64.s),
// over memory allocated outside the Go heap, calling only SuspendThread,
// GetThreadContext, ReadProcessMemory, ResumeThread and
// QueryPerformanceCounter. Every path that suspended a thread resumes it;
// the window never suspends itself or the Go thread that drives it. How
// long threads stayed suspended is measured with QueryPerformanceCounter
// and reported in [Session.Stats].
//
// Samples mean what Linux's cpu-clock samples mean. At each tick the
// sampler reads every thread's CPU time (GetThreadTimes, kernel plus user):
// a thread whose CPU time has not moved since its last sample is neither
// suspended nor sampled, and a sample weighs the CPU ns its thread used
// since its previous one. GetThreadTimes rather than QueryThreadCycleTime
// (precise, but in cycles that Microsoft says not to convert to time, and
// failing with FALSE under Wine 8) or the threads' wait states (one
// NtQuerySystemInformation snapshot of the whole system per tick, whose
// states Wine does not fill in): it is in 100 ns units, works everywhere,
// and costs one call per thread per tick — a system call on Windows;
// under Wine a wineserver round trip and a read of
// /proc/PID/task/TID/stat, 17-400 µs on a 2-core host at load 20
// (TestOnCPUFilter logs it), against 0.5-10 ms for a suspension there. It
// advances by the accounting quantum (15.6 ms on Windows, 10 ms under
// Wine), so a busy thread is sampled at most once per quantum, weighted
// by it; Stats gives the samples per CPU-second achieved against the
// rate asked, and the rounds per second.
//
// With Config.OffCPU a thread whose CPU time has stood still for more
// than two quanta waits: it is suspended once to take the stack it waits
// in, and the wait is reported as a sample flagged format.SampleOffCPU,
// stamped with the time it began and weighted by the ns it lasted, when
// the thread runs again, after at most a second (a long wait in parts) and
// when sampling ends. Thread names come from GetThreadDescription, asked
// again at the first refreshes since threads name themselves after they
// start.
//
// The package compiles on every OS; off Windows, [Open] and [Launch]
// return an error wrapping platform.ErrNotSupported. The image header
// reader ([ReadImageInfo]) is portable so that it is tested and fuzzed
// everywhere.
package windows
