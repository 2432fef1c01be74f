//go:build linux && (amd64 || arm64)

package ebpf

import (
	"os"
	"syscall"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/allocshim"
	"github.com/rawstack/rawstack/platform/linux/procfs"
)

// inject loads the allocation sampler into the running target pid
// (allocshim.Inject: ptrace, a remote dlopen, its modules' allocator
// slots redirected) and puts the uprobes on its markers first, so that
// none of its first samples is missed. When samples copy the stack, the
// sampler gets a shared ring, made where the target's mount namespace
// sees it and given to the target's user; a sampler that cannot write
// it (another pid namespace) still reads the recorder's stamps there.
func (s *Session) inject(pid int) error {
	b := s.bpf
	dir, err := allocshim.DirFor(pid)
	if err != nil {
		return &allocshim.InjectError{Pid: pid, Reason: "placing the sampler", Err: err}
	}
	lib, err := allocshim.Install(dir.Host)
	if err != nil {
		return &allocshim.InjectError{Pid: pid, Reason: "placing the sampler", Err: err}
	}
	if err := b.progs.attachShim(lib); err != nil {
		return &allocshim.InjectError{Pid: pid, Reason: "probing the sampler's markers", Err: err}
	}
	var ring *allocshim.Ring
	if uw := s.Unwinder(); uw != nil {
		ring, err = allocshim.CreateRing(dir.Host, shimRingBytes, min(uw.StackBytes(), allocshim.MaxRingStack), 0)
		if err != nil {
			ring = nil
		} else if err := giveToOwner(ring, pid); err != nil {
			ring.Close()
			ring = nil
		}
	}
	rate := s.Config().AllocRate
	if rate <= 0 {
		rate = platform.DefaultAllocRate
	}
	in, err := allocshim.Inject(pid, allocshim.InjectConfig{Dir: dir, Rate: rate, Ring: ring})
	if err != nil {
		if ring != nil {
			ring.Close()
		}
		return err
	}
	b.injected, b.injectUsed, b.shim, b.shimUsed = in, true, lib, true
	if ring != nil {
		b.ring, b.ringUsed = ring, in.Ringed
		s.PollInterval = shimReadInterval
	}
	return nil
}

// allocAttach samples the allocations of the running target: the
// injected sampler, or where it cannot be (why is kept for the summary),
// uprobes on the allocator the process maps.
func (s *Session) allocAttach() error {
	pid := s.Pid()
	err := s.inject(pid)
	if err == nil {
		return nil
	}
	s.bpf.injectWhy = err.Error()
	lib, err := findAllocator(pid)
	if err != nil {
		return err
	}
	return s.bpf.progs.attachAlloc(lib, pid)
}

// giveToOwner chowns the ring to the owner of process pid when that is
// not this user: a service run as its own user opens it.
func giveToOwner(r *allocshim.Ring, pid int) error {
	fi, err := os.Stat(procfs.Dir(pid))
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() {
		return nil
	}
	return r.Chown(int(st.Uid), int(st.Gid))
}

// detachSampler ends an injected sampler at a clean detach: the ring
// says the recorder left, and rawstack_detach in the target makes the
// sampler inert and puts the slots back. The records written until then
// are read after.
func (s *Session) detachSampler() {
	b := s.bpf
	if b.injected == nil {
		return
	}
	if b.ring != nil {
		b.ring.Detach()
	}
	b.detachErr = b.injected.Detach()
	b.injected = nil
}
