// Package perf is rawstack's perf_event back end on Linux: a [Session]
// samples a process (the caller itself, a running PID or a command it
// launches) with perf_event_open and reports threads, modules and
// frame-pointer call chains to a [platform.Handler]. Most programs reach
// it through package platform/linux ([platform.Config] Backend unset or
// BackendPerf); what it shares with the eBPF back end (the process,
// thread and module tracking, the perf ring reader, the online unwinder)
// is package platform/linux/tracking.
//
// One perf event is opened per existing thread and CPU with inherit set, so
// threads and processes created later are followed; the records of all
// events of a CPU go to one mmap'd ring buffer that is read in place.
// Modules come from /proc/PID/maps at start and from PERF_RECORD_MMAP2
// afterwards; each ELF module carries its GNU and Go build ids, read when
// the mapping is seen (through /proc/PID/root, so containers work).
//
// With [platform.Config] Unwind set to UnwindDWARF or UnwindAuto, samples
// carry the user registers and a copy of the top of the user stack
// (PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER) instead of the user part
// of the callchain. The goroutine that drains the rings unwinds them
// (package platform/linux/tracking) with package arch: a module's table is made from its file the first time a
// walk passes through it, cached per file (and forgotten once no process
// maps the file); in dwarf mode it is lazy (arch.NewLazyTableELF: an FDE
// is parsed the first time an address in it is looked up, found through
// .eh_frame_hdr), auto mode builds it whole and follows frame pointers in
// modules whose CFI says they keep them. A sample the reader
// reaches more than two seconds late is dropped and reported as Lost
// (LostUnwind), so an unwinder that falls behind catches up. With KeepRaw
// the registers and stack copy are reported as they are, for offline
// unwinding.
//
// With [platform.Config] Alloc, native allocations are recorded by the
// allocation sampler (package platform/linux/allocshim): preloaded into
// a command the session launches, injected into a running process. It
// writes each sampled allocation (registers and a stack copy, unwound
// here as a CPU sample's; in frame-pointer mode the return addresses of
// its frame-pointer chain, which it walks itself) and each free of a
// sampled block into a ring shared with the session, whose records
// [Session.ReadAll] merges with the perf rings' by time. This back end
// puts no uprobes anywhere: a writer that finds the ring full waits for
// room, and a process the sampler cannot be injected into is an error
// saying why.
package perf
