// Package win is rawstack's one door to the Windows API: thread and module
// enumeration (Toolhelp32), thread and process handles, memory reads,
// QueryPerformanceCounter, DLL load notifications and the addresses of the
// functions the sampler's native thread calls. Every Windows call of
// platform/windows and tracer goes through here.
package win
