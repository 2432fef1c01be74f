//go:build linux

package perf

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	sys "github.com/rawstack/rawstack/internal/unix"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/allocshim"
	"github.com/rawstack/rawstack/platform/linux/cpython"
	"github.com/rawstack/rawstack/platform/linux/procfs"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// Session samples one target process (and the processes it forks) with
// perf_event_open: one event per thread and CPU, one ring per CPU.
type Session struct {
	*tracking.Tracker
}

// Open starts sampling the running process cfg.Pid (0: the caller).
//
// With cfg.Alloc, the allocation sampler is injected into the process
// (tracking.Tracker.InjectSampler: ptrace, a remote dlopen, its modules'
// allocator slots redirected) and writes every sampled allocation into
// a ring shared with the session; a process it cannot be injected into
// is an error saying why (the eBPF back end has uprobes to fall back
// on; this one has none).
func Open(cfg platform.Config, h platform.Handler) (*Session, error) {
	s := &Session{tracking.New(cfg, h)}
	if err := s.OpenTarget(cfg.Pid); err != nil {
		return nil, err
	}
	if cfg.Alloc {
		if s.Self() {
			return nil, &platform.OptionError{Option: "Alloc", Backend: "perf", OS: "linux", Reason: "the allocation sampler is injected into another process (a program records its own heap with HeapInterval)"}
		}
		if err := s.EnableAlloc("perf"); err != nil {
			return nil, err
		}
	}
	if err := s.attach(); err != nil {
		return nil, err
	}
	return s, nil
}

// goWakeupEvents is how many samples a ring takes before it wakes the
// reader when goroutines are recorded (a few milliseconds at 1 kHz).
const goWakeupEvents = 4

// Launch starts cmd (not yet started) stopped at its first instruction,
// attaches to it and lets it run. The caller must not call cmd.Wait: the
// session reaps the command; [tracking.Tracker.ExitErr] reports how it
// ended.
//
// With cfg.Alloc, the command gets the allocation sampler preloaded
// (LD_PRELOAD), which writes every sampled allocation into a ring shared
// with the session.
func Launch(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (*Session, error) {
	s := &Session{tracking.New(cfg, h)}
	if cfg.Alloc {
		if err := s.EnableAlloc("perf"); err != nil {
			return nil, err
		}
		if _, err := s.PreloadSampler(cmd, true, allocRingFlags); err != nil {
			return nil, err
		}
	}
	if err := s.Launch(cmd, s.attach, s.Close); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// allocRingFlags are the shared ring's: this back end puts no uprobes on
// the sampler's markers, so a sampler waits for room in the ring.
const allocRingFlags = allocshim.RingWait

// Probe reports whether sampling with perf_event_open works here; the
// error wraps platform.ErrNotSupported and says why when it does not.
func Probe() error { return tracking.ProbePerf() }

// Run reads the rings and reports events until ctx is done or the target
// is gone, then reads what is left and returns.
func (s *Session) Run(ctx context.Context) error { return s.Tracker.Run(ctx, s.ReadAll) }

// attach reports the target's current state to the handler and opens and
// enables the perf events.
func (s *Session) attach() error {
	if err := tracking.ProbePerf(); err != nil {
		return err
	}
	if s.Allocs() && s.Launched() {
		if err := allocshim.Preloadable(s.Pid()); err != nil {
			return err
		}
	}
	privileged := procfs.PerfPrivileged()
	paranoid := procfs.SysctlInt("kernel.perf_event_paranoid", 2)
	s.SetKernel(!s.Config().NoKernel && (privileged || paranoid <= 1))
	freq := s.Config().Frequency
	if max := procfs.SysctlInt("kernel.perf_event_max_sample_rate", 100000); max > 0 && freq > max {
		freq = max
	}
	s.Config().Frequency = freq
	tids, err := procfs.Tasks(s.Pid())
	if err != nil {
		return fmt.Errorf("pid %d: listing threads: %w", s.Pid(), err)
	}
	cpus := procfs.OnlineCPUs()
	pages := s.Config().RingPages
	for pages&(pages-1) != 0 {
		pages &= pages - 1 // round down to a power of two
	}
	if pages <= 0 {
		pages = 128
		if s.Unwinder() != nil {
			pages = 512 // DWARF samples carry a stack copy: give the unwinding reader slack
		}
		if !privileged {
			// perf_event_mlock_kb (516 KiB by default) is shared by all
			// rings of the user; keep within it.
			budget := procfs.SysctlInt("kernel.perf_event_mlock_kb", 516) * 1024 / sys.PageSize
			for pages > 8 && (pages+1)*len(cpus) > budget {
				pages /= 2
			}
		}
	}
	// Pick the event: hardware cycles where the PMU has them, else cpu-clock.
	attr := tracking.BaseAttr(sys.PerfTypeHardware, sys.PerfCountHWCPUCycles, freq, s.KernelFrames())
	s.SetEvent("cycles")
	if fd, err := sys.PerfEventOpen(&attr, tids[0], cpus[0], -1); err != nil {
		attr = tracking.BaseAttr(sys.PerfTypeSoftware, sys.PerfCountSWCPUClock, freq, s.KernelFrames())
		s.SetEvent("cpu-clock")
	} else {
		sys.Close(fd)
	}
	if s.Unwinder() != nil {
		s.Unwinder().ChooseAuto(s.Pid())
	}
	s.SetUserAttr(&attr)
	if s.Goroutines() || s.Python() {
		// A sample's goroutine and labels, and its Python frames, are
		// read from the target when the reader gets to it, and a
		// goroutine that has ended has no labels left to read (a Python
		// thread's frames move on): wake the reader every few samples
		// rather than when half the ring is full (or its 50 ms timeout).
		attr.Wakeup = goWakeupEvents
	}
	if s.Python() && (!s.Self() || mapsPython(s.Pid())) {
		// A Python thread's calls can be a millisecond long: read its
		// frames at each sample's wakeup (tens of µs after it), not
		// after a few more samples. A program that embeds the tracer
		// is no Python process unless it has an interpreter mapped
		// now: it pays for no wakeup per sample.
		attr.Wakeup = 1
	}
	if attr.Wakeup == 0 {
		// Else the kernel wakes the reader at every sample (a
		// wakeup_events of 0 counts as 1): 2,000 wakeups a second
		// at 999 Hz on two busy CPUs, each a goroutine switch in the
		// traced program when the tracer is embedded. A quarter of a
		// ring wakes it; Run's 50 ms wait bounds the delay.
		attr.Bits |= sys.PerfBitWatermark
		attr.Wakeup = uint32(pages * sys.PageSize / 4)
	}

	s.ReportInitial(tids)

	s.Rings = make([]*tracking.Ring, len(cpus))
	openThread := func(tid int) error {
		for ci, cpu := range cpus {
			fd, err := s.OpenSampling(&attr, tid, cpu)
			if err == sys.ESRCH {
				return nil // the thread exited meanwhile
			}
			if err != nil {
				return s.openError(err, tid, paranoid, privileged)
			}
			s.FDs = append(s.FDs, fd)
			if s.Rings[ci] == nil {
				r, err := tracking.MapRing(fd, pages)
				for err != nil && (err == sys.EPERM || err == sys.ENOMEM) && pages > 1 {
					pages /= 2
					r, err = tracking.MapRing(fd, pages)
				}
				if err != nil {
					return fmt.Errorf("mmap of the perf ring buffer (%d pages): %w (raise kernel.perf_event_mlock_kb or RLIMIT_MEMLOCK)", pages, err)
				}
				s.Rings[ci] = r
				s.Polls = append(s.Polls, sys.PollFd{Fd: int32(fd), Events: sys.POLLIN})
			} else if err := sys.PerfSetOutput(fd, s.Rings[ci].FD()); err != nil {
				return fmt.Errorf("redirecting perf event output: %w", err)
			}
			if err := sys.PerfEnable(fd); err != nil {
				return fmt.Errorf("enabling perf event: %w", err)
			}
		}
		return nil
	}
	known := map[int]bool{}
	for _, tid := range tids {
		known[tid] = true
		if err := openThread(tid); err != nil {
			s.Close()
			return err
		}
	}
	s.ReportLateMappings()
	// A thread created while we were opening events, by a thread that had
	// none yet, inherited nothing. Threads created by a thread that had an
	// event were reported by a FORK record. Open the others directly, until
	// no such thread appears.
	s.BeginAttach()
	for round := 0; round < 20; round++ {
		s.ReadAll()
		now, err := procfs.Tasks(s.Pid())
		if err != nil {
			break // the target exited
		}
		var fresh []int
		for _, tid := range now {
			if !known[tid] && !s.Forked(uint32(tid)) {
				fresh = append(fresh, tid)
			}
		}
		if len(fresh) == 0 {
			break
		}
		time.Sleep(2 * time.Millisecond) // let a FORK record being written land
		s.ReadAll()
		t := sys.Monotonic()
		for _, tid := range fresh {
			known[tid] = true
			if s.Forked(uint32(tid)) {
				continue
			}
			s.Handler().ThreadStart(&format.ThreadStart{Time: t, Pid: uint32(s.Pid()), Tid: uint32(tid)})
			if name := procfs.Comm(procfs.Dir(s.Pid()) + "/task/" + strconv.Itoa(tid)); name != "" {
				s.ThreadName(t, uint32(s.Pid()), uint32(tid), name)
			}
			if err := openThread(tid); err != nil {
				s.Close()
				return err
			}
		}
	}
	s.EndAttach()
	if s.Allocs() && !s.Launched() {
		// After the process and its modules are reported (and
		// followed), so that the sampler's first samples have them.
		if err := s.InjectSampler(s.Pid(), true, allocRingFlags, nil); err != nil {
			s.Close()
			return err
		}
	}
	return nil
}

func (s *Session) openError(err error, tid, paranoid int, privileged bool) error {
	op := fmt.Sprintf("perf_event_open on pid %d (thread %d)", s.Pid(), tid)
	if err == sys.EACCES || err == sys.EPERM {
		need := "CAP_PERFMON (or root)"
		switch {
		case paranoid > 2:
			need = fmt.Sprintf("kernel.perf_event_paranoid<=2 (it is %d) or CAP_PERFMON", paranoid)
		case !s.Self() && !sameUser(s.Pid()):
			need = fmt.Sprintf("ptrace access to pid %d: run as its owner (uid %d) or with CAP_SYS_PTRACE, e.g. as root", s.Pid(), ownerUID(s.Pid()))
		case !s.Self():
			need = fmt.Sprintf("ptrace access to pid %d (kernel.yama.ptrace_scope=%d allows only descendants unless CAP_SYS_PTRACE)", s.Pid(), procfs.SysctlInt("kernel.yama.ptrace_scope", 0))
		}
		return &platform.PermissionError{Op: op, Need: need, Err: err}
	}
	if err == sys.EMFILE {
		return fmt.Errorf("%s: %w (one event per thread and CPU: raise the open-file limit)", op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func sameUser(pid int) bool { return ownerUID(pid) == os.Geteuid() }

// ownerUID returns the uid owning pid, or -1.
func ownerUID(pid int) int {
	st, err := os.Stat(procfs.Dir(pid))
	if err != nil {
		return -1
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(sys.Uid)
	}
	return -1
}

// ReadAll reads every record now in the rings and reports it.
//
// Records of different rings (CPUs), and those of the allocation
// sampler's shared ring, are merged by time, so that a mapping reported
// on one CPU precedes the samples taken in it on another. The sampler's
// records stamped after the rings were looked at wait for the next
// call: the mapping one needs may be in a record written meanwhile.
func (s *Session) ReadAll() {
	until := uint64(sys.Monotonic())
	live := s.BeginRead()
	s.BeginAllocRead()
	for {
		at, ok := s.AllocPending(until)
		if len(live) == 0 && !ok {
			break
		}
		i := tracking.Oldest(live)
		if ok && (i < 0 || at <= live[i].PendingTime) {
			s.ReportAllocRecord()
			continue
		}
		s.Handle(live[i].Pending)
		live = s.Advance(live, i)
	}
	s.Live = live
}

// mapsPython reports whether process pid has a python executable or a
// libpython mapped.
func mapsPython(pid int) bool {
	data, err := procfs.ReadSmall(procfs.Dir(pid)+"/maps", 64<<20)
	if err != nil {
		return true // cannot tell: as for any other process
	}
	maps, _ := procfs.ParseMaps(data)
	for _, m := range maps {
		if cpython.MaybePython(m.Path) {
			return true
		}
	}
	return false
}
