//go:build linux

package linux

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/procattr"
	"github.com/rawstack/rawstack/internal/procinfo"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
)

// Session samples one target process (and the processes it forks).
type Session struct {
	cfg     platform.Config
	h       platform.Handler
	pid     int
	self    bool
	cmd     *exec.Cmd     // launched target, or nil
	waited  chan struct{} // closed when cmd has been reaped
	exitErr error
	exitAt  int64

	kernel bool   // kernel frames requested from the kernel
	event  string // "cycles" or "cpu-clock"
	fds    []int
	rings  []*ring
	polls  []sys.PollFd
	// Run's wait: an epoll instance in Go's poller (wait_linux.go).
	waiter   *sys.Waiter
	nWaited  int  // polls added to waiter
	noWaiter bool // no epoll: poll(2)

	rec    record
	live   []*ring // ReadAll's working set
	sample platform.Sample

	procs     map[uint32]*procState
	throttled map[uint64]uint64  // event id → time throttling began
	kernelMod *format.ModuleLoad // reported for every process when kernel frames are on
	maxStack  int                // call chains this long were cut by the kernel
	forked    map[uint32]bool    // during attach: threads reported by FORK records
	nextMod   uint64
	ids       map[idKey]elfIDs
	samples   atomic.Uint64
	lost      atomic.Uint64
	records   atomic.Uint64
	bytes     atomic.Uint64
	closeOnce sync.Once
	uw        *unwinder // DWARF and auto modes
	bpf       *bpfState // BackendEBPF: programs, links and ring buffer
	mapsBuf   []byte    // /proc/PID/maps, reused
	system    bool      // BackendEBPF: every process of the host
	jit       *jitTracker
	gos       *goSampling // Config.Goroutines
}

type procState struct {
	comm    string
	attrs   []format.Label // resource attributes (package internal/procattr)
	modules []liveModule
	names   map[uint32]string // tid → name, for threads that inherit it
	// live counts the threads known to be running; leaderGone is set by
	// the leader's EXIT. In an exit_group the leader's EXIT record can
	// come before its siblings' (the leader waits as a zombie), and those
	// siblings are still sampled in do_exit with their user stacks: the
	// process ends, and its modules are unloaded, with its last thread.
	live       int
	leaderGone bool
}

// threadName reports tid's name and remembers it: the kernel writes no
// COMM record for a new thread, which starts with its creator's name.
func (s *Session) threadName(t int64, pid, tid uint32, name string) {
	if ps := s.procs[pid]; ps != nil {
		if ps.names == nil {
			ps.names = map[uint32]string{}
		}
		ps.names[tid] = name
	}
	s.h.ThreadName(&format.ThreadName{Time: t, Pid: pid, Tid: tid, Name: name})
}

type liveModule struct {
	id, start, end uint64
	ml             *format.ModuleLoad // as first reported, for forked children
}

type idKey struct {
	path     string
	dev, ino uint64
}

// Open starts sampling the running process cfg.Pid (0: the caller).
func Open(cfg platform.Config, h platform.Handler) (*Session, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	s := newSession(cfg, h)
	if cfg.System {
		s.system = true
	} else if cfg.Pid == 0 {
		s.pid, s.self = os.Getpid(), true
	} else {
		s.pid = cfg.Pid
		if !sys.ProcessAlive(s.pid) {
			return nil, fmt.Errorf("pid %d: no such process", s.pid)
		}
		if procinfo.KernelThread(s.pid) {
			return nil, fmt.Errorf("pid %d (%s): %w", s.pid, procinfo.Comm(s.pid), platform.ErrKernelThread)
		}
	}
	if err := s.attach(); err != nil {
		return nil, err
	}
	return s, nil
}

// Launch starts cmd (not yet started) stopped at its first instruction,
// attaches to it and lets it run. The caller must not call cmd.Wait: the
// session reaps the command; [Session.ExitErr] reports how it ended.
func Launch(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (*Session, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	if err := probe(); err != nil {
		return nil, err
	}
	s := newSession(cfg, h)
	// ptrace requests must come from the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s.pid, s.cmd = cmd.Process.Pid, cmd
	sig, exited, _, err := sys.WaitStopped(s.pid)
	if err != nil || exited || sig != int(syscall.SIGTRAP) {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("launching %s: child did not stop at exec (signal %d, exited %v): %v", cmd.Path, sig, exited, err)
	}
	if err := s.attach(); err != nil {
		cmd.Process.Kill()
		sys.PtraceDetach(s.pid)
		cmd.Wait()
		return nil, err
	}
	if err := sys.PtraceDetach(s.pid); err != nil {
		s.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("launching %s: detaching: %w", cmd.Path, err)
	}
	s.waited = make(chan struct{})
	go func() {
		s.exitErr = cmd.Wait()
		s.exitAt = sys.Monotonic()
		close(s.waited)
	}()
	return s, nil
}

func newSession(cfg platform.Config, h platform.Handler) *Session {
	if cfg.Frequency <= 0 {
		cfg.Frequency = 99
	}
	maxStack := sysctlInt("kernel.perf_event_max_stack", 127)
	if maxStack <= 0 || maxStack > maxCallchain {
		maxStack = maxCallchain
	}
	s := &Session{
		maxStack: maxStack,
		cfg:      cfg,
		h:        h,
		procs:    map[uint32]*procState{},
		ids:      map[idKey]elfIDs{},
		rec:      record{PCs: make([]uint64, 0, maxCallchain)},
		uw:       newUnwinder(cfg),
	}
	if s.uw != nil {
		s.rec.nUserRegs = s.uw.nRegs()
	}
	if s.jit = newJITTracker(cfg, h); s.jit != nil {
		s.jit.fileBacked = s.fileBacked
	}
	if cfg.Goroutines {
		s.gos = newGoSampling()
	}
	if s.gos != nil {
		mask := s.gos.mask
		if s.uw != nil {
			mask = s.uw.mask // holds both registers already
		} else {
			s.rec.nUserRegs, s.rec.regsOnly = bits.OnesCount64(mask), true
		}
		s.gos.place(mask)
	}
	return s
}

// Pid returns the target process id.
func (s *Session) Pid() int { return s.pid }

// Event names the perf event sampled: "cycles" or "cpu-clock".
func (s *Session) Event() string { return s.event }

// KernelFrames reports whether kernel frames are recorded.
func (s *Session) KernelFrames() bool { return s.kernel }

// ExitErr returns cmd.Wait's result for a launched command once it has
// exited, and nil before.
func (s *Session) ExitErr() error {
	if s.waited == nil {
		return nil
	}
	select {
	case <-s.waited:
		return s.exitErr
	default:
		return nil
	}
}

// Stats returns the running totals.
func (s *Session) Stats() platform.Stats {
	return platform.Stats{Samples: s.samples.Load(), Lost: s.lost.Load(), Records: s.records.Load(), Bytes: s.bytes.Load()}
}

var (
	probeOnce sync.Once
	probeErr  error
)

// probe checks once that perf_event_open is usable at all.
func probe() error {
	probeOnce.Do(func() {
		if _, err := os.Stat("/proc/sys/kernel/perf_event_paranoid"); err != nil {
			probeErr = &platform.NotSupportedError{Feature: "perf_event_open", Reason: "kernel built without perf events (no /proc/sys/kernel/perf_event_paranoid)"}
			return
		}
		attr := baseAttr(sys.PerfTypeSoftware, sys.PerfCountSWCPUClock, 99, false)
		fd, err := sys.PerfEventOpen(&attr, 0, -1, -1)
		if err != nil {
			reason := err.Error()
			if p := sysctlInt("kernel.perf_event_paranoid", 2); p > 2 && !perfPrivileged() {
				reason = fmt.Sprintf("kernel.perf_event_paranoid=%d forbids unprivileged use; set it to 2 or lower, or grant CAP_PERFMON", p)
			} else if err == sys.ENOSYS || err == sys.ENOENT {
				reason = "perf_event_open is unavailable (seccomp or kernel config): " + err.Error()
			} else if err == sys.EPERM || err == sys.EACCES {
				reason = "perf_event_open denied although kernel.perf_event_paranoid allows it: a seccomp profile (containers) or an LSM forbids it: " + err.Error()
			}
			probeErr = &platform.NotSupportedError{Feature: "perf_event_open", Reason: reason}
			return
		}
		sys.Close(fd)
	})
	return probeErr
}

// goWakeupEvents is how many samples a ring takes before it wakes the
// reader when goroutines are recorded (a few milliseconds at 1 kHz).
const goWakeupEvents = 4

// Probe reports whether sampling with perf_event_open works here; the
// error wraps platform.ErrNotSupported and says why when it does not.
func Probe() error { return probe() }

func baseAttr(typ uint32, config uint64, freq int, kernel bool) sys.PerfEventAttr {
	// mmap must be set along with mmap2: the kernel only reports mappings
	// at all while some event has mmap (or mmap_data) set.
	attr := sys.PerfEventAttr{
		Type:        typ,
		Config:      config,
		Sample:      uint64(freq),
		Sample_type: sys.PerfSampleIP | sys.PerfSampleTID | sys.PerfSampleTime | sys.PerfSampleCPU | sys.PerfSamplePeriod | sys.PerfSampleCallchain,
		Bits: sys.PerfBitDisabled | sys.PerfBitInherit | sys.PerfBitFreq | sys.PerfBitMmap | sys.PerfBitMmap2 | sys.PerfBitComm |
			sys.PerfBitTask | sys.PerfBitSampleIDAll | sys.PerfBitCommExec | sys.PerfBitUseClockID | sys.PerfBitExcludeHv,
		Clockid: sys.ClockMonotonic,
	}
	if !kernel {
		attr.Bits |= sys.PerfBitExcludeKernel
	}
	return attr
}

// attach reports the target's current state to the handler and opens and
// enables the perf events.
func (s *Session) attach() error {
	if err := probe(); err != nil {
		return err
	}
	if s.cfg.Backend == platform.BackendEBPF {
		return s.attachBPF()
	}
	privileged := perfPrivileged()
	paranoid := sysctlInt("kernel.perf_event_paranoid", 2)
	s.kernel = !s.cfg.NoKernel && (privileged || paranoid <= 1)
	freq := s.cfg.Frequency
	if max := sysctlInt("kernel.perf_event_max_sample_rate", 100000); max > 0 && freq > max {
		freq = max
	}
	s.cfg.Frequency = freq
	tids, err := procTasks(s.pid)
	if err != nil {
		return fmt.Errorf("pid %d: listing threads: %w", s.pid, err)
	}
	cpus := onlineCPUs()
	pages := s.cfg.RingPages
	for pages&(pages-1) != 0 {
		pages &= pages - 1 // round down to a power of two
	}
	if pages <= 0 {
		pages = 128
		if s.uw != nil {
			pages = 512 // DWARF samples carry a stack copy: give the unwinding reader slack
		}
		if !privileged {
			// perf_event_mlock_kb (516 KiB by default) is shared by all
			// rings of the user; keep within it.
			budget := sysctlInt("kernel.perf_event_mlock_kb", 516) * 1024 / sys.PageSize
			for pages > 8 && (pages+1)*len(cpus) > budget {
				pages /= 2
			}
		}
	}
	// Pick the event: hardware cycles where the PMU has them, else cpu-clock.
	attr := baseAttr(sys.PerfTypeHardware, sys.PerfCountHWCPUCycles, freq, s.kernel)
	s.event = "cycles"
	if fd, err := sys.PerfEventOpen(&attr, tids[0], cpus[0], -1); err != nil {
		attr = baseAttr(sys.PerfTypeSoftware, sys.PerfCountSWCPUClock, freq, s.kernel)
		s.event = "cpu-clock"
	} else {
		sys.Close(fd)
	}
	if s.uw != nil {
		s.uw.chooseAuto(s.pid)
		s.uw.setAttr(&attr)
	} else if s.gos != nil {
		attr.Sample_type |= perfSampleRegsUser
		attr.Sample_regs_user = s.gos.mask
	}
	if s.gos != nil {
		// A sample's goroutine and labels are read from the target when
		// the reader gets to it, and a goroutine that has ended has no
		// labels left to read: wake the reader every few samples rather
		// than when half the ring is full (or its 50 ms timeout).
		attr.Wakeup = goWakeupEvents
	}

	s.reportInitial(tids)

	s.rings = make([]*ring, len(cpus))
	openThread := func(tid int) error {
		for ci, cpu := range cpus {
			fd, err := sys.PerfEventOpen(&attr, tid, cpu, -1)
			if err == sys.ESRCH {
				return nil // the thread exited meanwhile
			}
			if err != nil {
				return s.openError(err, tid, paranoid, privileged)
			}
			s.fds = append(s.fds, fd)
			if s.rings[ci] == nil {
				r, err := mapRing(fd, pages)
				for err != nil && (err == sys.EPERM || err == sys.ENOMEM) && pages > 1 {
					pages /= 2
					r, err = mapRing(fd, pages)
				}
				if err != nil {
					return fmt.Errorf("mmap of the perf ring buffer (%d pages): %w (raise kernel.perf_event_mlock_kb or RLIMIT_MEMLOCK)", pages, err)
				}
				s.rings[ci] = r
				s.polls = append(s.polls, sys.PollFd{Fd: int32(fd), Events: sys.POLLIN})
			} else if err := sys.PerfSetOutput(fd, s.rings[ci].fd); err != nil {
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
	// A thread created while we were opening events, by a thread that had
	// none yet, inherited nothing. Threads created by a thread that had an
	// event were reported by a FORK record. Open the others directly, until
	// no such thread appears.
	s.forked = map[uint32]bool{}
	for round := 0; round < 20; round++ {
		s.ReadAll()
		now, err := procTasks(s.pid)
		if err != nil {
			break // the target exited
		}
		var fresh []int
		for _, tid := range now {
			if !known[tid] && !s.forked[uint32(tid)] {
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
			if s.forked[uint32(tid)] {
				continue
			}
			s.h.ThreadStart(&format.ThreadStart{Time: t, Pid: uint32(s.pid), Tid: uint32(tid)})
			if name := procComm(procDir(s.pid) + "/task/" + strconv.Itoa(tid)); name != "" {
				s.threadName(t, uint32(s.pid), uint32(tid), name)
			}
			if err := openThread(tid); err != nil {
				s.Close()
				return err
			}
		}
	}
	s.forked = nil
	return nil
}

func (s *Session) openError(err error, tid, paranoid int, privileged bool) error {
	op := fmt.Sprintf("perf_event_open on pid %d (thread %d)", s.pid, tid)
	if err == sys.EACCES || err == sys.EPERM {
		need := "CAP_PERFMON (or root)"
		switch {
		case paranoid > 2:
			need = fmt.Sprintf("kernel.perf_event_paranoid<=2 (it is %d) or CAP_PERFMON", paranoid)
		case !s.self && !sameUser(s.pid):
			need = fmt.Sprintf("ptrace access to pid %d: run as its owner (uid %d) or with CAP_SYS_PTRACE, e.g. as root", s.pid, ownerUID(s.pid))
		case !s.self:
			need = fmt.Sprintf("ptrace access to pid %d (kernel.yama.ptrace_scope=%d allows only descendants unless CAP_SYS_PTRACE)", s.pid, sysctlInt("kernel.yama.ptrace_scope", 0))
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
	st, err := os.Stat(procDir(pid))
	if err != nil {
		return -1
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(sys.Uid)
	}
	return -1
}

// reportInitial reports the process, its threads and its executable
// mappings as they are now.
func (s *Session) reportInitial(tids []int) {
	s.reportProcess(s.pid, tids, sys.Monotonic())
}

// reportProcess reports process ipid, its threads and its executable
// mappings as they are at time now.
func (s *Session) reportProcess(ipid int, tids []int, now int64) {
	pid := uint32(ipid)
	dir := procDir(ipid)
	comm := procComm(dir)
	attrs := procattr.Read(ipid)
	s.h.Process(&format.Process{Time: now, Pid: pid, Ppid: uint32(procPpid(ipid)), Name: comm, Cmdline: procCmdline(ipid), Attrs: attrs})
	ps := &procState{comm: comm, attrs: attrs, live: len(tids)}
	s.procs[pid] = ps
	s.jit.started(pid)
	for _, tid := range tids {
		s.h.ThreadStart(&format.ThreadStart{Time: now, Pid: pid, Tid: uint32(tid)})
		name := procComm(dir + "/task/" + strconv.Itoa(tid))
		if name != "" {
			s.threadName(now, pid, uint32(tid), name)
		}
	}
	if s.kernel {
		if k, ok := kernelModule(); ok {
			k.Time, k.Pid = now, pid
			s.nextMod++
			k.ID = s.nextMod
			s.kernelMod = &k
			s.h.ModuleLoad(&k) // not in procState: the kernel is never unmapped
		}
	}
	var err error
	s.mapsBuf, err = readInto(dir+"/maps", s.mapsBuf[:0], 64<<20)
	if err != nil {
		return
	}
	maps, _ := parseMaps(s.mapsBuf)
	for i := range maps {
		m := &maps[i]
		if !m.Exec() {
			continue
		}
		s.loadModule(now, pid, m.Start, m.End, m.Offset, uint64(m.Major)<<32|uint64(m.Minor), m.Inode, m.Path, nil)
	}
}

// loadModule reports an executable mapping, unloading what it replaces.
func (s *Session) loadModule(t int64, pid uint32, start, end, off, dev, ino uint64, path string, bid []byte) {
	ps := s.procs[pid]
	if ps == nil {
		ps = &procState{}
		s.procs[pid] = ps
	}
	kept := ps.modules[:0]
	for _, m := range ps.modules {
		if m.start < end && start < m.end {
			s.h.ModuleUnload(&format.ModuleUnload{Time: t, Pid: pid, ID: m.id})
			continue
		}
		kept = append(kept, m)
	}
	ps.modules = kept
	s.nextMod++
	ml := format.ModuleLoad{Time: t, Pid: pid, ID: s.nextMod, Base: start, Size: end - start, FileOffset: off, Path: path}
	switch {
	case path == "[vdso]":
		ml.Kind = format.ModuleVDSO
	case path == "" || strings.HasPrefix(path, "[") || strings.HasPrefix(path, "//anon") || strings.HasPrefix(path, "/memfd:"):
		ml.Kind = format.ModuleAnon
	case strings.HasPrefix(path, "/tmp/perf-") && strings.HasSuffix(path, ".map"):
		ml.Kind = format.ModuleJIT
	default:
		ids, ok := s.moduleIDs(pid, path, dev, ino)
		if ok {
			ml.Kind = format.ModuleELF
			ml.BuildID, ml.GoBuildID = ids.BuildID, ids.GoBuildID
		}
		if len(ml.BuildID) == 0 && len(bid) > 0 {
			ml.BuildID = append([]byte(nil), bid...)
			ml.Kind = format.ModuleELF
		}
	}
	ps.modules = append(ps.modules, liveModule{id: ml.ID, start: start, end: end, ml: &ml})
	s.h.ModuleLoad(&ml)
}

// moduleIDs reads (and caches) the build ids of path as process pid sees it.
func (s *Session) moduleIDs(pid uint32, path string, dev, ino uint64) (elfIDs, bool) {
	key := idKey{path, dev, ino}
	if ids, ok := s.ids[key]; ok {
		return ids, ids.BuildID != nil || ids.GoBuildID != "" || ino != 0
	}
	path = strings.TrimSuffix(path, " (deleted)")
	var ids elfIDs
	ok := false
	for _, p := range []string{procDir(int(pid)) + "/root" + path, path} {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue // never block reading a device or FIFO
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		ids, err = readBuildIDs(f)
		f.Close()
		if err == nil {
			ok = true
			break
		}
	}
	if len(s.ids) > 4096 {
		clear(s.ids)
	}
	s.ids[key] = ids
	return ids, ok
}

var (
	kernelOnce sync.Once
	kernelMod  format.ModuleLoad
	kernelOK   bool
)

// kernelModule returns the kernel text range from /proc/kallsyms and the
// kernel build id from /sys/kernel/notes, when readable.
func kernelModule() (format.ModuleLoad, bool) {
	kernelOnce.Do(func() {
		f, err := os.Open("/proc/kallsyms")
		if err != nil {
			return
		}
		defer f.Close()
		var start, end uint64
		sc := bufio.NewScanner(f)
		for sc.Scan() && (start == 0 || end == 0) {
			line := sc.Text()
			sp := strings.IndexByte(line, ' ')
			if sp < 0 {
				continue
			}
			name := line[sp+3:]
			if name == "_stext" || name == "_etext" {
				v, err := strconv.ParseUint(line[:sp], 16, 64)
				if err != nil || v == 0 {
					return // addresses hidden by kptr_restrict
				}
				if name == "_stext" {
					start = v
				} else {
					end = v
				}
			}
		}
		if start == 0 || end <= start {
			return
		}
		kernelMod = format.ModuleLoad{Base: start, Size: end - start, Kind: format.ModuleKernel, Path: "[kernel.kallsyms]"}
		if notes, err := readSmall("/sys/kernel/notes", maxNoteBytes); err == nil {
			var ids elfIDs
			parseNotes(notes, nativeEndian(), 4, &ids)
			kernelMod.BuildID = ids.BuildID
		}
		kernelOK = true
	})
	return kernelMod, kernelOK
}

// Run reads the rings and reports events until ctx is done or the target
// is gone, then reads what is left and returns.
func (s *Session) Run(ctx context.Context) error {
	lastCheck := time.Now()
	defer s.closeWaiter()
	for {
		if err := s.wait(50 * time.Millisecond); err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		s.ReadAll()
		s.jit.poll()
		if ctx.Err() != nil {
			s.ReadAll()
			s.jit.finish()
			return nil
		}
		if s.waited != nil {
			select {
			case <-s.waited:
				s.ReadAll()
				s.jit.finish()
				s.h.ProcessEnd(&format.ProcessEnd{Time: s.exitAt, Pid: uint32(s.pid), ExitCode: exitCode(s.exitErr)})
				return nil
			default:
			}
		} else if !s.self && !s.system && time.Since(lastCheck) > 100*time.Millisecond {
			lastCheck = time.Now()
			if !sys.ProcessAlive(s.pid) {
				s.ReadAll()
				s.jit.finish()
				return nil
			}
		}
	}
}

// ReadAll reads every record now in the rings and reports it.
//
// Records of different rings (CPUs) are merged by time, so that a mapping
// reported on one CPU precedes the samples taken in it on another.
func (s *Session) ReadAll() {
	if s.bpf != nil {
		s.readAllBPF()
		return
	}
	live := s.live[:0]
	for _, r := range s.rings {
		if r == nil {
			continue
		}
		r.begin()
		if r.pending = r.next(); r.pending != nil {
			r.pendingTime = recordTime(r.pending)
			live = append(live, r)
		} else {
			s.bytes.Add(r.commit())
		}
	}
	for len(live) > 0 {
		best := 0
		for i := 1; i < len(live); i++ {
			if live[i].pendingTime < live[best].pendingTime {
				best = i
			}
		}
		r := live[best]
		s.handle(r.pending)
		if r.pending = r.next(); r.pending != nil {
			r.pendingTime = recordTime(r.pending)
			continue
		}
		s.bytes.Add(r.commit())
		live[best] = live[len(live)-1]
		live = live[:len(live)-1]
	}
	s.live = live
}

func exitCode(err error) int64 {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			return -int64(st.Signal())
		}
		return int64(ee.ExitCode())
	}
	return -1
}

// handle decodes and reports one record.
func (s *Session) handle(b []byte) {
	r := &s.rec
	if err := decodeRecord(b, r); err != nil {
		return
	}
	s.dispatch(r)
}

// dispatch reports one decoded record.
func (s *Session) dispatch(r *record) {
	s.records.Add(1)
	t := int64(r.Time)
	switch r.Type {
	case recSample:
		s.reportSample(r, 0)
	case recMmap2:
		if s.jit.mmap(r.Pid, string(r.Filename)) {
			return // a jitdump file announced by its runtime, not code
		}
		if r.Prot&0x4 == 0 { // PROT_EXEC
			return
		}
		s.loadModule(t, r.Pid, r.Addr, r.Addr+r.Len, r.Pgoff, uint64(r.Maj)<<32|uint64(r.Min), r.Ino, string(r.Filename), r.BuildID)
	case recComm:
		name := string(r.Comm)
		if r.Misc&miscCommExec != 0 && r.Pid == r.Tid {
			ps := s.procs[r.Pid]
			if ps != nil {
				for _, m := range ps.modules {
					s.h.ModuleUnload(&format.ModuleUnload{Time: t, Pid: r.Pid, ID: m.id})
				}
				ps.modules = ps.modules[:0]
				ps.comm = name
			}
			if s.gos != nil {
				s.gos.gr.forget(r.Pid)
			}
			attrs := procattr.Read(int(r.Pid)) // a new executable, maybe a new environment
			if ps != nil {
				ps.attrs = attrs
			}
			s.h.Process(&format.Process{Time: t, Pid: r.Pid, Ppid: uint32(procPpid(int(r.Pid))), Name: name, Cmdline: procCmdline(int(r.Pid)), Attrs: attrs})
		}
		s.threadName(t, r.Pid, r.Tid, name)
	case recFork:
		if r.Pid != r.Ppid {
			// A new process: it starts with a copy of its parent's mappings.
			parent := s.procs[r.Ppid]
			ps := &procState{live: 1}
			comm := ""
			if parent != nil {
				comm = parent.comm
				ps.attrs = parent.attrs // a fork keeps the executable, cgroup and environment
			}
			ps.comm = comm
			s.procs[r.Pid] = ps
			s.jit.started(r.Pid)
			s.h.Process(&format.Process{Time: t, Pid: r.Pid, Ppid: r.Ppid, Name: comm, Attrs: ps.attrs})
			s.h.ThreadStart(&format.ThreadStart{Time: t, Pid: r.Pid, Tid: r.Tid})
			if parent != nil {
				for _, m := range parent.modules {
					s.copyModule(t, r.Ppid, r.Pid, m)
				}
			}
			if s.kernelMod != nil {
				k := *s.kernelMod
				s.nextMod++
				k.Time, k.Pid, k.ID = t, r.Pid, s.nextMod
				s.h.ModuleLoad(&k)
			}
			return
		}
		if s.forked != nil {
			s.forked[r.Tid] = true
		}
		s.h.ThreadStart(&format.ThreadStart{Time: t, Pid: r.Pid, Tid: r.Tid})
		if ps := s.procs[r.Pid]; ps != nil {
			ps.live++
			name := ps.names[r.Ptid]
			if name == "" {
				name = ps.comm
			}
			if name != "" {
				s.threadName(t, r.Pid, r.Tid, name)
			}
		}
	case recExit:
		s.h.ThreadEnd(&format.ThreadEnd{Time: t, Pid: r.Pid, Tid: r.Tid})
		ps := s.procs[r.Pid]
		if ps != nil {
			delete(ps.names, r.Tid)
			ps.live--
			if r.Pid == r.Tid {
				ps.leaderGone = true
			}
		}
		if ps != nil && ps.leaderGone && ps.live <= 0 || ps == nil && r.Pid == r.Tid {
			s.jit.exit(r.Pid)
			if ps != nil {
				for _, m := range ps.modules {
					s.h.ModuleUnload(&format.ModuleUnload{Time: t, Pid: r.Pid, ID: m.id})
				}
				delete(s.procs, r.Pid)
			}
			if s.gos != nil {
				s.gos.gr.forget(r.Pid)
			}
			if int(r.Pid) != s.pid || s.cmd == nil {
				s.h.ProcessEnd(&format.ProcessEnd{Time: t, Pid: r.Pid, ExitCode: -1})
			}
		}
	case recThrottle:
		if s.throttled == nil {
			s.throttled = map[uint64]uint64{}
		}
		if len(s.throttled) < 1<<16 {
			s.throttled[r.ID] = r.Time
		}
	case recUnthrottle:
		// The kernel stopped sampling for a while; report the samples that
		// the frequency says were due meanwhile.
		since, ok := s.throttled[r.ID]
		if !ok || r.Time < since {
			return
		}
		delete(s.throttled, r.ID)
		n := (r.Time - since) * uint64(s.cfg.Frequency) / 1e9
		if n == 0 {
			n = 1
		}
		s.lost.Add(n)
		s.h.Lost(&format.Lost{Time: t, Pid: r.Pid, Count: n, Reason: format.LostThrottled})
	case recLost, recLostSamples:
		s.lost.Add(r.Lost)
		s.h.Lost(&format.Lost{Time: t, Pid: r.Pid, Count: r.Lost, Reason: format.LostRingOverflow})
	}
}

// reportSample reports a sample record (a perf sample, or one the eBPF
// back end decoded into the same fields), unwinding its user stack in the
// DWARF modes. flags are added to the sample's.
func (s *Session) reportSample(r *record, flags format.SampleFlags) {
	if s.prepareSample(r, flags) {
		s.samples.Add(1)
		s.h.Sample(&s.sample)
	}
}

// prepareSample fills s.sample from r and unwinds it; it returns false
// when the sample was dropped.
func (s *Session) prepareSample(r *record, flags format.SampleFlags) bool {
	sm := &s.sample
	sm.Time, sm.Pid, sm.Tid, sm.CPU, sm.Weight = int64(r.Time), r.Pid, r.Tid, r.CPU, r.Period
	sm.Flags = flags
	if r.Kernel {
		sm.Flags |= format.SampleKernel
	}
	if len(r.PCs) >= s.maxStack {
		sm.Flags |= format.SampleTruncated
	}
	sm.PCs = r.PCs
	sm.Goroutine, sm.LabelSet, sm.NewLabels = 0, 0, nil
	if s.gos != nil && r.UserABI != 0 && len(r.UserRegs) > max(s.gos.gIdx, s.gos.sIdx) {
		sm.Goroutine, sm.LabelSet, sm.NewLabels = s.gos.gr.goroutine(r.Pid, r.UserRegs[s.gos.gIdx], r.UserRegs[s.gos.sIdx])
	}
	return s.uw == nil || s.uw.sample(s, r, sm)
}

// copyModule reports, for a forked child, a module inherited from its parent.
func (s *Session) copyModule(t int64, from, to uint32, m liveModule) {
	s.nextMod++
	ml := *m.ml
	ml.Time, ml.Pid, ml.ID = t, to, s.nextMod
	ps := s.procs[to]
	ps.modules = append(ps.modules, liveModule{id: ml.ID, start: m.start, end: m.end, ml: &ml})
	s.h.ModuleLoad(&ml)
}

// Close stops sampling and releases the events and rings.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		for _, fd := range s.fds {
			sys.PerfDisable(fd)
		}
		for _, r := range s.rings {
			if r != nil {
				sys.Munmap(r.mem)
			}
		}
		for _, fd := range s.fds {
			sys.Close(fd)
		}
		s.fds, s.rings, s.polls = nil, nil, nil
		if s.bpf != nil {
			s.bpf.close()
		}
		s.jit.close()
	})
	return nil
}

// NewReplay returns a Session with no kernel events behind it: records
// handed to [Session.Replay] go through the same decoding and module and
// thread tracking as a live session's. It serves benchmarks and fuzzing of
// the record → handler path, and replaying captured ring contents.
func NewReplay(pid int, h platform.Handler) *Session {
	s := newSession(platform.Config{Pid: pid}, h)
	s.pid = pid
	return s
}

// Replay reports the perf records laid out back to back in recs, as in a
// ring buffer's data area, and returns how many bytes it consumed. It stops
// at a truncated or malformed record header.
func (s *Session) Replay(recs []byte) int {
	off := 0
	for len(recs)-off >= 8 {
		n := int(recs[off+6]) | int(recs[off+7])<<8
		if n < 8 || off+n > len(recs) {
			break
		}
		s.handle(recs[off : off+n])
		off += n
	}
	s.bytes.Add(uint64(off))
	return off
}
