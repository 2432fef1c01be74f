//go:build linux && (amd64 || arm64)

package ebpf

// allocAttach samples the allocations of the running target: the
// injected sampler (tracking.Tracker.InjectSampler: ptrace, a remote
// dlopen, its modules' allocator slots redirected), with the uprobes on
// its markers put first, so that none of its first samples is missed,
// and, when samples copy the stack, a shared ring; or where it cannot be
// (why is kept for the summary), uprobes on the allocator the process
// maps. A sampler in another pid namespace cannot write pids the
// recorder knows into the ring; it still reads the recorder's stamps
// there, and its markers serve.
func (s *Session) allocAttach() error {
	pid := s.Pid()
	err := s.InjectSampler(pid, s.Unwinder() != nil, 0, s.bpf.progs.attachShim)
	if err == nil {
		return nil
	}
	s.SetAllocFallback(err.Error())
	lib, err := findAllocator(pid)
	if err != nil {
		return err
	}
	return s.bpf.progs.attachAlloc(lib, pid)
}
