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
// The package compiles on every OS; off Windows, [Open] and [Launch]
// return an error wrapping platform.ErrNotSupported. The image header
// reader ([ReadImageInfo]) is portable so that it is tested and fuzzed
// everywhere.
package windows
