// Package linux is rawstack's Linux back end: it samples a process (the
// caller itself, a running PID or a command it launches) with
// perf_event_open and reports threads, modules and frame-pointer call
// chains to a [platform.Handler].
//
// One perf event is opened per existing thread and CPU with inherit set, so
// threads and processes created later are followed; the records of all
// events of a CPU go to one mmap'd ring buffer that is read in place.
// Modules come from /proc/PID/maps at start and from PERF_RECORD_MMAP2
// afterwards; each ELF module carries its GNU and Go build ids, read when
// the mapping is seen (through /proc/PID/root, so containers work).
//
// On other systems every entry point returns an error wrapping
// platform.ErrNotSupported.
package linux
