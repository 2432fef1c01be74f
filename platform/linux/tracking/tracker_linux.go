//go:build linux

package tracking

import (
	"bufio"
	"bytes"
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
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/cpython"
	"github.com/rawstack/rawstack/platform/linux/goruntime"
	"github.com/rawstack/rawstack/platform/linux/jit"
	"github.com/rawstack/rawstack/platform/linux/procfs"
)

// Tracker is what both Linux back ends' sessions hold (they embed it):
// the processes, threads and modules of what is sampled, kept from /proc
// and from perf side-band records; the perf rings and their wait; the
// online unwinder, the JIT tracker and the goroutine reader; and the
// counters. A back end's session opens the events and reads its rings;
// the Tracker turns what they carry into handler calls (api_linux.go is
// what the back ends call).
type Tracker struct {
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
	FDs    []int
	Rings  []*Ring
	Polls  []sys.PollFd
	// PollInterval, when set, is how long Run waits for a wakeup before
	// it reads anyway (50 ms when 0). Run reads it before each wait, so
	// that the back end's read may change it.
	PollInterval time.Duration
	// JITInterval, when set, caps the wait while a process's JIT frames
	// are read from its runtime's metadata (V8, HotSpot): they are read
	// from its heap as it is when the sample is drained, and code the
	// runtime replaced meanwhile leaves them anonymous.
	JITInterval time.Duration
	// OnV8, when set, is told of each process found to run V8, once
	// (a whole-host session asks its BPF program to wake it at that
	// process's samples: V8 replaces its code too soon for a read once
	// a second).
	OnV8 func(pid uint32)
	// Run's wait: an epoll instance in Go's poller (wait_linux.go).
	waiter   *sys.Waiter
	nWaited  int  // polls added to waiter
	noWaiter bool // no epoll: poll(2)
	// wake, an eventfd in Polls, ends Run's wait when its context is
	// done or the launched command has been reaped, whatever
	// PollInterval says (wakeFD makes it, Close closes it; -1: none).
	wakeMu   sync.Mutex
	wake     int
	wakeMade bool

	rec    record
	Live   []*Ring // a ReadAll's working set
	sample platform.Sample

	procs     map[uint32]*procState
	gone      map[uint32]bool    // sampled after their EXIT record (EnsureProcess)
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
	uw        *Unwinder // DWARF and auto modes
	mapsBuf   []byte    // /proc/PID/maps, reused
	system    bool      // every process of the host (the eBPF back end)
	jit       *jit.Tracker
	gos       *goruntime.Sampling // Config.Goroutines
	py        *cpython.Sampling   // nil with Config.NoPython
	js        jsFrames            // V8's frames (v8_linux.go)
	alloc     *allocState         // Config.Alloc (alloc_linux.go)
	idc       *idCacher           // the build-id cache's writer (idcache_linux.go); nil when off
	gIdx      int                 // Config.SampleG: the g register's index in a record's UserRegs; -1 without
	goSamples atomic.Uint64
	goWarning atomic.Pointer[string]
	pySamples atomic.Uint64
	// pyStale: a sample drained later than this after it was taken,
	// of a process the back end reads at the sample since
	// pyAtSampleSince (ns), gets no Python frames read from user space
	pyStale         int64
	pyAtSampleSince map[uint32]int64
	// pyAtSample: those of pySamples whose frames were read at the sample
	pyAtSample atomic.Uint64
	pyCut      atomic.Uint64
	pyWarning  atomic.Pointer[string]
	jsSamples  atomic.Uint64
	jsCut      atomic.Uint64
	jsWarning  atomic.Pointer[string]
}

type procState struct {
	comm  string
	ppid  uint32
	attrs []format.Label // resource attributes (package internal/procattr)
	// described is false, whole host, for a process that exec'd and was
	// not sampled since: its attributes and command line are read from
	// /proc at its first sample (describe), not at its exec. Most
	// processes of a host that starts many are never sampled, and at the
	// exec the kernel may not have written the new environment yet.
	described bool
	// reported is false, whole host, for a process started (forked)
	// since the session began and not sampled yet: the Tracker follows its
	// threads and modules, but tells the handler nothing about it until
	// its first sample (report), and nothing at all if it is never
	// sampled. A host that starts fifty processes a second sampled few of
	// them, and their events were most of what the agent did.
	reported bool
	modules  []liveModule
	names    map[uint32]string // tid → name, for threads that inherit it
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
func (s *Tracker) threadName(t int64, pid, tid uint32, name string) {
	if ps := s.procs[pid]; ps != nil {
		if ps.names == nil {
			ps.names = map[uint32]string{}
		}
		ps.names[tid] = name
		if !ps.reported {
			return
		}
	}
	s.h.ThreadName(&format.ThreadName{Time: t, Pid: pid, Tid: tid, Name: name})
}

type liveModule struct {
	id, start, end uint64 // id 0: not reported (procState.reported)
	// ml is the module as reported, for forked children; in a process
	// not reported, the parent's or the mmap's, with its pid and id.
	ml *format.ModuleLoad
}

type idKey struct {
	path     string
	dev, ino uint64
}

// Launch starts cmd (not yet started) stopped at its first instruction,
// calls attach (the back end's: it opens the events and reports the
// target) and lets it run; closeSession is the session's Close. The
// caller must not call cmd.Wait: the Tracker reaps the command;
// [Tracker.ExitErr] reports how it ended.
func (s *Tracker) Launch(cmd *exec.Cmd, attach, closeSession func() error) error {
	if err := probe(); err != nil {
		return err
	}
	// ptrace requests must come from the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	if err := cmd.Start(); err != nil {
		return err
	}
	s.pid, s.cmd = cmd.Process.Pid, cmd
	sig, exited, _, err := sys.WaitStopped(s.pid)
	if err != nil || exited || sig != int(syscall.SIGTRAP) {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("launching %s: child did not stop at exec (signal %d, exited %v): %v", cmd.Path, sig, exited, err)
	}
	if err := attach(); err != nil {
		cmd.Process.Kill()
		sys.PtraceDetach(s.pid)
		cmd.Wait()
		return err
	}
	if err := sys.PtraceDetach(s.pid); err != nil {
		closeSession()
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("launching %s: detaching: %w", cmd.Path, err)
	}
	s.waited = make(chan struct{})
	go func() {
		s.exitErr = cmd.Wait()
		s.exitAt = sys.Monotonic()
		close(s.waited)
		s.signalWake()
	}()
	return nil
}

// New returns a Tracker for cfg that reports to h. Nothing is opened:
// a back end's session opens its events and sets the fields it fills.
func New(cfg platform.Config, h platform.Handler) *Tracker {
	if cfg.Frequency <= 0 {
		cfg.Frequency = 99
	}
	maxStack := procfs.SysctlInt("kernel.perf_event_max_stack", 127)
	if maxStack <= 0 || maxStack > maxCallchain {
		maxStack = maxCallchain
	}
	s := &Tracker{
		maxStack: maxStack,
		cfg:      cfg,
		h:        h,
		procs:    map[uint32]*procState{},
		ids:      map[idKey]elfIDs{},
		rec:      record{PCs: make([]uint64, 0, maxCallchain)},
		uw:       newUnwinder(cfg),
		gIdx:     -1,
	}
	if s.uw != nil {
		s.rec.NUserRegs, s.rec.UserRegsMask = s.uw.nRegs(), s.uw.mask
	}
	if s.jit = jit.New(cfg, h); s.jit != nil {
		s.jit.FileBacked = s.fileBacked
	}
	if cfg.Goroutines {
		s.gos = goruntime.NewSampling()
	}
	if !cfg.NoPython {
		s.py = cpython.NewSampling()
	}
	if !cfg.NoBuildIDCache {
		s.idc = newIDCacher(cfg.BuildIDCache, cfg.BuildIDCacheMax)
	}
	s.js.init(s, cfg)
	if g, sp, ok := goruntime.Regs(); ok && (s.gos != nil || cfg.SampleG) {
		mask := uint64(1)<<g | 1<<sp
		if s.uw != nil {
			mask = s.uw.mask // holds both registers already
		} else {
			s.rec.NUserRegs, s.rec.regsOnly = bits.OnesCount64(mask), true
		}
		s.rec.UserRegsMask = mask
		if s.gos != nil {
			s.gos.Place(mask)
		}
		if cfg.SampleG {
			s.gIdx = bits.OnesCount64(mask & (1<<g - 1))
		}
	}
	return s
}

// Pid returns the target process id.
func (s *Tracker) Pid() int { return s.pid }

// Event names the perf event sampled: "cycles" or "cpu-clock".
func (s *Tracker) Event() string { return s.event }

// KernelFrames reports whether kernel frames are recorded.
func (s *Tracker) KernelFrames() bool { return s.kernel }

// ExitErr returns cmd.Wait's result for a launched command once it has
// exited, and nil before.
func (s *Tracker) ExitErr() error {
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
func (s *Tracker) Stats() platform.Stats {
	st := platform.Stats{Samples: s.samples.Load(), Lost: s.lost.Load(), Records: s.records.Load(), Bytes: s.bytes.Load(),
		PythonSamples: s.pySamples.Load(), PythonCut: s.pyCut.Load(), PythonAtSample: s.pyAtSample.Load()}
	if w := s.pyWarning.Load(); w != nil {
		st.PythonWarning = *w
	}
	st.GoSamples = s.goSamples.Load()
	if w := s.goWarning.Load(); w != nil {
		st.GoWarning = *w
	}
	st.JITSamples, st.JITCut = s.jsSamples.Load(), s.jsCut.Load()
	if w := s.jsWarning.Load(); w != nil {
		st.JITWarning = *w
	}
	s.allocStats(&st)
	st.BuildIDCache = s.idc.summary()
	return st
}

var (
	probeOnce sync.Once
	probeErr  error
)

// probe checks once that perf_event_open is usable at all; both
// back ends need it. The error wraps platform.ErrNotSupported and says
// why when it is not.
func probe() error {
	probeOnce.Do(func() {
		if _, err := os.Stat("/proc/sys/kernel/perf_event_paranoid"); err != nil {
			probeErr = &platform.NotSupportedError{Feature: "perf_event_open", Reason: "kernel built without perf events (no /proc/sys/kernel/perf_event_paranoid)"}
			return
		}
		attr := baseAttr(sys.PerfTypeSoftware, sys.PerfCountSWCPUClock, 99, false)
		fd, err := sys.PerfEventOpen(&attr, 0, -1, -1)
		if err != nil {
			probeErr = probeError(err)
			return
		}
		sys.Close(fd)
	})
	return probeErr
}

// probeError sorts the probe's perf_event_open failure three ways: the
// kernel lacks the feature (ENOENT, ENOSYS, EOPNOTSUPP, ENODEV) is
// [platform.ErrNotSupported]; no privilege (EACCES, EPERM) is a
// [platform.PermissionError]; anything else (EINVAL, E2BIG: our attribute
// is wrong) is a plain error, so that no caller takes a bug of ours for a
// missing feature.
func probeError(err error) error {
	switch err {
	case sys.ENOSYS, sys.ENOENT, sys.EOPNOTSUPP, sys.ENODEV:
		return &platform.NotSupportedError{Feature: "perf_event_open", Reason: "perf_event_open is unavailable (kernel config or seccomp): " + err.Error()}
	case sys.EPERM, sys.EACCES:
		p := procfs.SysctlInt("kernel.perf_event_paranoid", 2)
		if p > 2 && !procfs.PerfPrivileged() {
			return &platform.PermissionError{Op: "perf_event_open of a cpu-clock event on this process", Need: fmt.Sprintf("kernel.perf_event_paranoid<=2 (it is %d) or CAP_PERFMON", p), Err: err}
		}
		return &platform.PermissionError{Op: "perf_event_open of a cpu-clock event on this process", Need: fmt.Sprintf("a seccomp profile (containers) or LSM that allows perf_event_open; kernel.perf_event_paranoid=%d already does", p), Err: err}
	}
	return fmt.Errorf("perf_event_open of a cpu-clock event on this process: %w (the attribute is wrong, not a missing feature)", err)
}

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

// reportInitial reports the process, its threads and its executable
// mappings as they are now.
func (s *Tracker) reportInitial(tids []int) {
	s.reportProcess(s.pid, tids, sys.Monotonic())
}

// reportProcess reports process ipid, its threads and its executable
// mappings as they are at time now.
func (s *Tracker) reportProcess(ipid int, tids []int, now int64) {
	pid := uint32(ipid)
	dir := procfs.Dir(ipid)
	comm := procfs.Comm(dir)
	ps := &procState{comm: comm, ppid: uint32(procfs.Ppid(ipid)), live: len(tids), described: !s.system, reported: true}
	if ps.described {
		ps.attrs = procattr.Read(ipid)
		s.h.Process(&format.Process{Time: now, Pid: pid, Ppid: ps.ppid, Name: comm, Cmdline: procfs.Cmdline(ipid), Attrs: ps.attrs})
	} else {
		s.h.Process(&format.Process{Time: now, Pid: pid, Ppid: ps.ppid, Name: comm})
	}
	s.procs[pid] = ps
	s.jit.Started(pid)
	for _, tid := range tids {
		s.h.ThreadStart(&format.ThreadStart{Time: now, Pid: pid, Tid: uint32(tid)})
		name := procfs.Comm(dir + "/task/" + strconv.Itoa(tid))
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
	s.reportMappings(pid, now, false)
}

// reportMappings reports the executable mappings of process pid as
// /proc/PID/maps lists them now; with onlyNew, only those not reported
// already at the same addresses.
func (s *Tracker) reportMappings(pid uint32, now int64, onlyNew bool) {
	var err error
	s.mapsBuf, err = procfs.ReadInto(procfs.Dir(int(pid))+"/maps", s.mapsBuf[:0], 64<<20)
	if err != nil {
		return
	}
	maps, _ := procfs.ParseMaps(s.mapsBuf)
	for i := range maps {
		m := &maps[i]
		if s.jit.MMap(pid, m.Path) {
			// A jitdump file its runtime mapped before the recording
			// (an attached process): code names, not code, as when
			// its mmap record arrives.
			continue
		}
		if !m.Exec() || onlyNew && s.known(pid, m.Start, m.End) {
			continue
		}
		s.loadModule(now, pid, m.Start, m.End, m.Offset, uint64(m.Major)<<32|uint64(m.Minor), m.Inode, m.Path, nil)
	}
}

// known reports whether process pid has a module reported at exactly
// start..end.
func (s *Tracker) known(pid uint32, start, end uint64) bool {
	if ps := s.procs[pid]; ps != nil {
		for _, m := range ps.modules {
			if m.start == start && m.end == end {
				return true
			}
		}
	}
	return false
}

// loadModule reports an executable mapping, unloading what it replaces.
func (s *Tracker) loadModule(t int64, pid uint32, start, end, off, dev, ino uint64, path string, bid []byte) {
	ps := s.procs[pid]
	if ps == nil {
		ps = &procState{described: !s.system, reported: !s.system}
		s.procs[pid] = ps
	}
	kept := ps.modules[:0]
	for _, m := range ps.modules {
		if m.start < end && start < m.end {
			if ps.reported {
				s.h.ModuleUnload(&format.ModuleUnload{Time: t, Pid: pid, ID: m.id})
			}
			continue
		}
		kept = append(kept, m)
	}
	ps.modules = kept
	ml := format.ModuleLoad{Time: t, Pid: pid, Base: start, Size: end - start, FileOffset: off, Path: path}
	if ps.reported {
		s.nextMod++
		ml.ID = s.nextMod
	}
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
	if ps.reported {
		s.h.ModuleLoad(&ml)
	}
	if ml.Kind == format.ModuleELF {
		s.idc.module(pid, path, ml.BuildID)
	}
	if s.py != nil && ml.Kind == format.ModuleELF {
		s.pyLoaded(pid, path, start, off)
	}
	if ml.Kind == format.ModuleELF {
		s.js.loaded(pid, path, start, end)
	}
}

// pyLoaded looks for an interpreter in a module of pid and keeps the
// warnings about those it cannot read where Stats finds them.
func (s *Tracker) pyLoaded(pid uint32, path string, start, off uint64) {
	n := len(s.py.Errors())
	s.py.ModuleLoaded(pid, path, start, off)
	if errs := s.py.Errors(); len(errs) > n {
		w := errors.Join(errs...).Error()
		s.pyWarning.Store(&w)
	}
}

// moduleIDs reads (and caches) the build ids of path as process pid sees it.
func (s *Tracker) moduleIDs(pid uint32, path string, dev, ino uint64) (elfIDs, bool) {
	key := idKey{path, dev, ino}
	if ids, ok := s.ids[key]; ok {
		return ids, ids.BuildID != nil || ids.GoBuildID != "" || ino != 0
	}
	path = strings.TrimSuffix(path, " (deleted)")
	var ids elfIDs
	ok, opened := false, false
	for _, p := range []string{procfs.Dir(int(pid)) + "/root" + path, path} {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue // never block reading a device or FIFO
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		opened = true
		ids, err = readBuildIDs(f)
		f.Close()
		if err == nil {
			ok = true
			break
		}
	}
	if !opened {
		// Neither the process's root nor the host had the file: the
		// process is gone (a container that lived milliseconds) and
		// the host has no such path. Not remembered: the next process
		// mapping the same file reads it, or every process of that
		// build would stay without its build id, unnamed and uncached.
		return ids, false
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
			// Bytes, not Text: the lines before _etext are most of the
			// file (4 MB of strings made and dropped at the agent's start).
			line := sc.Bytes()
			sp := bytes.IndexByte(line, ' ')
			if sp < 0 || sp+3 > len(line) {
				continue
			}
			if name := line[sp+3:]; string(name) == "_stext" || string(name) == "_etext" {
				v, err := strconv.ParseUint(string(line[:sp]), 16, 64)
				if err != nil || v == 0 {
					return // addresses hidden by kptr_restrict
				}
				if string(name) == "_stext" {
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
		if notes, err := procfs.ReadSmall("/sys/kernel/notes", maxNoteBytes); err == nil {
			var ids elfIDs
			parseNotes(notes, nativeEndian(), 4, &ids)
			kernelMod.BuildID = ids.BuildID
		}
		kernelOK = true
	})
	return kernelMod, kernelOK
}

// Run reads the rings with readAll (the back end's) and reports events
// until ctx is done or the target is gone, then reads what is left and
// returns. An injected allocation sampler is detached at the end, and
// what it wrote until then is read.
func (s *Tracker) Run(ctx context.Context, readAll func()) error {
	err := s.run(ctx, readAll)
	if s.Injected() {
		s.DetachSampler()
		readAll()
	}
	return err
}

func (s *Tracker) run(ctx context.Context, readAll func()) error {
	lastCheck := time.Now()
	defer s.closeWaiter()
	if wake := s.wakeFD(); wake >= 0 {
		s.Polls = append(s.Polls, sys.PollFd{Fd: int32(wake), Events: sys.POLLIN})
		defer context.AfterFunc(ctx, s.signalWake)()
	}
	for {
		// Read at each wait: readAll may change it (how full a ring
		// that wakes nobody is).
		interval := s.PollInterval
		if interval == 0 {
			interval = 50 * time.Millisecond
		}
		if s.JITInterval > 0 && interval > s.JITInterval && s.js.any() {
			interval = s.JITInterval
		}
		if err := s.wait(interval); err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		readAll()
		s.jit.Poll()
		if ctx.Err() != nil {
			readAll()
			s.jit.Finish()
			return nil
		}
		if s.waited != nil {
			select {
			case <-s.waited:
				readAll()
				s.jit.Finish()
				s.h.ProcessEnd(&format.ProcessEnd{Time: s.exitAt, Pid: uint32(s.pid), ExitCode: exitCode(s.exitErr)})
				return nil
			default:
			}
		} else if !s.self && !s.system && time.Since(lastCheck) > 100*time.Millisecond {
			lastCheck = time.Now()
			if !sys.ProcessAlive(s.pid) {
				readAll()
				s.jit.Finish()
				return nil
			}
		}
	}
}

// wakeFD returns the eventfd that ends Run's wait early, made on first
// use; -1 when it cannot be made (the wait then ends on its timeout) or
// the Tracker is closed.
func (s *Tracker) wakeFD() int {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	if !s.wakeMade {
		s.wakeMade = true
		fd, err := sys.NewWake()
		if err != nil {
			fd = -1
		}
		s.wake = fd
	}
	return s.wake
}

// signalWake ends Run's current or next wait. Safe from any goroutine,
// before or after Close.
func (s *Tracker) signalWake() {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	if s.wakeMade && s.wake >= 0 {
		sys.Wake(s.wake)
	}
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
func (s *Tracker) handle(b []byte) {
	r := &s.rec
	if err := decodeRecord(b, r); err != nil {
		return
	}
	s.dispatch(r)
}

// dispatch reports one decoded record.
func (s *Tracker) dispatch(r *record) {
	s.records.Add(1)
	t := int64(r.Time)
	switch r.Type {
	case recSample:
		s.reportSample(r, 0)
	case recMmap2:
		if s.jit.MMap(r.Pid, string(r.Filename)) {
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
					if ps.reported {
						s.h.ModuleUnload(&format.ModuleUnload{Time: t, Pid: r.Pid, ID: m.id})
					}
				}
				ps.modules = ps.modules[:0]
				ps.comm = name
			}
			if s.gos != nil {
				s.gos.Forget(r.Pid)
			}
			if s.py != nil {
				s.py.Forget(r.Pid)
				delete(s.pyAtSampleSince, r.Pid)
			}
			s.js.forget(r.Pid)
			if s.system && ps != nil {
				// A new executable, maybe a new environment: read at
				// the first sample (describe).
				ps.attrs, ps.described = nil, false
				if ps.reported {
					s.h.Process(&format.Process{Time: t, Pid: r.Pid, Ppid: ps.ppid, Name: name})
				}
			} else {
				attrs := procattr.Read(int(r.Pid))
				if ps != nil {
					ps.attrs = attrs
				}
				s.h.Process(&format.Process{Time: t, Pid: r.Pid, Ppid: uint32(procfs.Ppid(int(r.Pid))), Name: name, Cmdline: procfs.Cmdline(int(r.Pid)), Attrs: attrs})
			}
		}
		s.threadName(t, r.Pid, r.Tid, name)
	case recFork:
		if r.Pid != r.Ppid {
			// A new process: it starts with a copy of its parent's mappings.
			parent := s.procs[r.Ppid]
			ps := &procState{live: 1, ppid: r.Ppid, described: true, reported: !s.system}
			delete(s.gone, r.Pid)
			comm := ""
			if parent != nil {
				comm = parent.comm
				ps.attrs = parent.attrs // a fork keeps the executable, cgroup and environment
				ps.described = parent.described
			}
			ps.comm = comm
			s.procs[r.Pid] = ps
			s.jit.Started(r.Pid)
			if ps.reported {
				s.h.Process(&format.Process{Time: t, Pid: r.Pid, Ppid: r.Ppid, Name: comm, Attrs: ps.attrs})
				s.h.ThreadStart(&format.ThreadStart{Time: t, Pid: r.Pid, Tid: r.Tid})
			}
			if parent != nil {
				ps.modules = make([]liveModule, 0, len(parent.modules))
				for _, m := range parent.modules {
					s.copyModule(t, r.Ppid, r.Pid, m)
				}
			}
			if s.kernelMod != nil && ps.reported {
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
		ps := s.procs[r.Pid]
		if ps == nil || ps.reported {
			s.h.ThreadStart(&format.ThreadStart{Time: t, Pid: r.Pid, Tid: r.Tid})
		}
		if ps != nil {
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
		ps := s.procs[r.Pid]
		reported := ps == nil || ps.reported
		if reported {
			s.h.ThreadEnd(&format.ThreadEnd{Time: t, Pid: r.Pid, Tid: r.Tid})
		}
		if s.alloc != nil && s.alloc.ns != nil {
			s.alloc.ns.exit(r.Tid)
		}
		if ps != nil {
			delete(ps.names, r.Tid)
			ps.live--
			if r.Pid == r.Tid {
				ps.leaderGone = true
			}
		}
		if ps != nil && ps.leaderGone && ps.live <= 0 || ps == nil && r.Pid == r.Tid {
			// Samples taken in do_exit come after this record, while the
			// process may still be a zombie in /proc: EnsureProcess must
			// not report it again (state no EXIT would remove).
			s.markGone(r.Pid)
			s.jit.Exit(r.Pid)
			if ps != nil {
				for _, m := range ps.modules {
					if reported {
						s.h.ModuleUnload(&format.ModuleUnload{Time: t, Pid: r.Pid, ID: m.id})
					}
				}
				delete(s.procs, r.Pid)
			}
			if s.gos != nil {
				s.gos.Forget(r.Pid)
			}
			if s.py != nil {
				s.py.Forget(r.Pid)
				delete(s.pyAtSampleSince, r.Pid)
			}
			s.js.forget(r.Pid)
			if reported && (int(r.Pid) != s.pid || s.cmd == nil) {
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
func (s *Tracker) reportSample(r *record, flags format.SampleFlags) {
	if s.prepareSample(r, flags) {
		s.samples.Add(1)
		s.h.Sample(&s.sample)
	}
}

// prepareSample fills s.sample from r and unwinds it; it returns false
// when the sample was dropped.
func (s *Tracker) prepareSample(r *record, flags format.SampleFlags) bool {
	sm := &s.sample
	sm.Time, sm.Pid, sm.Tid, sm.CPU, sm.Weight = int64(r.Time), r.Pid, r.Tid, r.CPU, r.Period
	if s.event == "cycles" { // a period in cycles: the sample stands for 1/Frequency s of CPU (format/SPEC.md §6.10: ns)
		sm.Weight = uint64(time.Second) / uint64(s.cfg.Frequency)
	}
	sm.Flags = flags
	sm.Chain = nil
	if r.Kernel {
		sm.Flags |= format.SampleKernel
	}
	if len(r.PCs) >= s.maxStack {
		sm.Flags |= format.SampleTruncated
	}
	sm.PCs = r.PCs
	if ps := s.procs[r.Pid]; ps != nil && (!ps.reported || !ps.described) {
		s.report(r.Pid, r.Tid, ps, int64(r.Time))
	}
	sm.Goroutine, sm.LabelSet, sm.NewLabels, sm.G = 0, 0, nil, 0
	if s.gIdx >= 0 && r.UserABI != 0 && s.gIdx < len(r.UserRegs) {
		sm.G = r.UserRegs[s.gIdx]
	}
	if s.gos != nil && r.UserABI != 0 {
		sm.Goroutine, sm.LabelSet, sm.NewLabels = s.gos.Goroutine(r.Pid, r.UserRegs)
		if sm.Goroutine != 0 {
			s.goSamples.Add(1)
		} else if w := s.gos.Warning(); w != "" && s.goWarning.Load() == nil {
			s.goWarning.Store(&w)
		}
	}
	sm.Python, sm.NewPyCodes, sm.PyGIL = nil, nil, format.PyGILNone
	if s.py != nil && sm.Flags&format.SampleOffCPU == 0 {
		if r.PyRead { // read at the sample, in BPF
			sm.Python, sm.NewPyCodes = s.py.FramesRaw(r.Pid, r.Py, r.PyCut, r.PyGIL)
		} else {
			sm.Python, sm.NewPyCodes = s.py.Frames(r.Pid, r.Tid, int64(r.Time))
			if known, ok := s.pyAtSampleSince[r.Pid]; ok && int64(r.Time) > known && sys.Monotonic()-int64(r.Time) > s.pyStale {
				// A sample the back end should have read at the sample
				// (it knew the process), drained too long after it to
				// be its frames (the thread has moved on): native
				// stack only; the new code objects are kept. Samples
				// taken before the back end knew the process are read
				// here, as the perf back end reads all of them.
				sm.Python = nil
				s.py.ClearGIL()
			}
		}
		sm.PyGIL = s.py.GIL()
		if len(sm.Python) > 0 {
			s.pySamples.Add(1)
			if r.PyRead {
				s.pyAtSample.Add(1)
			}
		}
		s.pyCut.Store(s.py.Cut())
	}
	sm.JIT, sm.NewJITFuncs = nil, nil
	if s.uw != nil && !s.uw.sample(s, r, sm) {
		return false
	}
	if sm.Flags&format.SampleOffCPU == 0 {
		sm.JIT, sm.NewJITFuncs = s.js.frames(r, sm)
	}
	return true
}

// report tells the handler, at the first sample of process pid (thread
// tid, time t) since it started or exec'd (whole host), what it did not
// yet: the process with its attributes and command line read from /proc
// now (the environment of an exec is complete by then), and, if it was
// not reported at all, its threads' names and its modules, as of t.
func (s *Tracker) report(pid, tid uint32, ps *procState, t int64) {
	cmdline := procfs.Cmdline(int(pid))
	if !ps.described {
		ps.described = true
		ps.attrs = procattr.Read(int(pid))
	}
	s.h.Process(&format.Process{Time: t, Pid: pid, Ppid: ps.ppid, Name: ps.comm, Cmdline: cmdline, Attrs: ps.attrs})
	if ps.reported {
		return
	}
	ps.reported = true
	s.h.ThreadStart(&format.ThreadStart{Time: t, Pid: pid, Tid: tid})
	if _, ok := ps.names[tid]; !ok && ps.comm != "" {
		s.h.ThreadName(&format.ThreadName{Time: t, Pid: pid, Tid: tid, Name: ps.comm})
	}
	for other, name := range ps.names {
		if other != tid {
			s.h.ThreadStart(&format.ThreadStart{Time: t, Pid: pid, Tid: other})
		}
		s.h.ThreadName(&format.ThreadName{Time: t, Pid: pid, Tid: other, Name: name})
	}
	if s.kernelMod != nil {
		k := *s.kernelMod
		s.nextMod++
		k.Time, k.Pid, k.ID = t, pid, s.nextMod
		s.h.ModuleLoad(&k)
	}
	for i := range ps.modules {
		m := &ps.modules[i]
		ml := new(format.ModuleLoad)
		*ml = *m.ml
		s.nextMod++
		ml.Time, ml.Pid, ml.ID = t, pid, s.nextMod
		m.id, m.ml = ml.ID, ml
		s.h.ModuleLoad(ml)
	}
}

// copyModule reports, for a forked child, a module inherited from its
// parent; a child not reported shares the parent's.
func (s *Tracker) copyModule(t int64, from, to uint32, m liveModule) {
	ps := s.procs[to]
	if !ps.reported {
		ps.modules = append(ps.modules, liveModule{start: m.start, end: m.end, ml: m.ml})
		if s.py != nil && m.ml.Kind == format.ModuleELF {
			s.pyLoaded(to, m.ml.Path, m.ml.Base, m.ml.FileOffset)
		}
		if m.ml.Kind == format.ModuleELF {
			s.js.loaded(to, m.ml.Path, m.start, m.end)
		}
		return
	}
	s.nextMod++
	ml := *m.ml
	ml.Time, ml.Pid, ml.ID = t, to, s.nextMod
	ps.modules = append(ps.modules, liveModule{id: ml.ID, start: m.start, end: m.end, ml: &ml})
	s.h.ModuleLoad(&ml)
	if s.py != nil && ml.Kind == format.ModuleELF {
		s.pyLoaded(to, ml.Path, ml.Base, ml.FileOffset)
	}
	if ml.Kind == format.ModuleELF {
		s.js.loaded(to, ml.Path, m.start, m.end)
	}
}

// Close stops sampling and releases the perf events and rings and the
// JIT tracker's files; an injected allocation sampler is detached.
func (s *Tracker) Close() error {
	s.closeOnce.Do(func() {
		s.closeAlloc()
		for _, fd := range s.FDs {
			sys.PerfDisable(fd)
		}
		for _, r := range s.Rings {
			if r != nil {
				sys.Munmap(r.mem)
			}
		}
		for _, fd := range s.FDs {
			sys.Close(fd)
		}
		s.FDs, s.Rings, s.Polls = nil, nil, nil
		s.jit.Close()
		// A container's files are copied from descriptors opened while
		// it lived: let the copies end (a slow disk, a large binary).
		s.idc.close(30 * time.Second)
		s.wakeMu.Lock()
		if s.wakeMade && s.wake >= 0 {
			sys.Close(s.wake)
		}
		s.wakeMade, s.wake = true, -1
		s.wakeMu.Unlock()
	})
	return nil
}

// NewReplay returns a Tracker with no kernel events behind it: records
// handed to [Tracker.Replay] go through the same decoding and module and
// thread tracking as a live session's. It serves benchmarks and fuzzing of
// the record → handler path, and replaying captured ring contents.
func NewReplay(pid int, h platform.Handler) *Tracker {
	s := New(platform.Config{Pid: pid, NoBuildIDCache: true}, h)
	s.pid = pid
	return s
}

// Replay reports the perf records laid out back to back in recs, as in a
// ring buffer's data area, and returns how many bytes it consumed. It stops
// at a truncated or malformed record header.
func (s *Tracker) Replay(recs []byte) int {
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

// JITErrors returns the first problems met reading perf maps and jitdump
// files (malformed lines or records, each naming the file, offset and
// pid); reading went on past each.
func (s *Tracker) JITErrors() []error {
	return s.jit.Errors()
}

// fileBacked reports whether addr of pid lies in a module mapped from a
// file (ELF, vDSO): its code is named from the file.
func (s *Tracker) fileBacked(pid uint32, addr uint64) bool {
	ps := s.procs[pid]
	if ps == nil {
		return false
	}
	for _, m := range ps.modules {
		if addr >= m.start && addr < m.end && m.ml != nil && m.ml.Kind != format.ModuleAnon && m.ml.Kind != format.ModuleJIT {
			return true
		}
	}
	return false
}

// ModuleAt returns the module of process pid that holds addr, or nil.
func (s *Tracker) ModuleAt(pid uint32, addr uint64) *format.ModuleLoad {
	ps := s.procs[pid]
	if ps == nil {
		return nil
	}
	for _, m := range ps.modules {
		if addr >= m.start && addr < m.end {
			return m.ml
		}
	}
	return nil
}

// WholeHost sets the Tracker up for sampling every process of the host:
// a late sample makes no new unwind tables (maxBuildLag) and perf maps
// are watched from a process's first sample, not from its start.
func (s *Tracker) WholeHost() {
	s.system = true
	if s.uw != nil {
		s.uw.lazyLag = maxBuildLag
	}
	if s.jit != nil {
		s.jit.OnDemand = true
	}
}

// Known reports whether process pid has been reported.
func (s *Tracker) Known(pid uint32) bool { return s.procs[pid] != nil || s.gone[pid] }

// maxGone bounds the processes EnsureProcess remembers as gone.
const maxGone = 1024

// EnsureProcess reports process pid from /proc at time t if it was not
// reported yet (it started before its FORK record was read, or in a pid
// namespace race), so that its addresses have modules. A process gone
// meanwhile is remembered, not looked for again.
func (s *Tracker) EnsureProcess(pid uint32, t int64) {
	if s.procs[pid] != nil || pid == 0 || s.gone[pid] {
		return
	}
	if tids, err := procfs.Tasks(int(pid)); err == nil {
		s.reportProcess(int(pid), tids, t)
		return
	}
	// Gone (samples taken in do_exit come after the process's EXIT
	// record): no EXIT will come to forget it.
	s.markGone(pid)
}

// markGone remembers that pid has exited, in a set that is emptied when
// full (its entries matter for the moments after an exit) and that a
// FORK of the pid's next process leaves.
func (s *Tracker) markGone(pid uint32) {
	if s.gone == nil || len(s.gone) >= maxGone {
		s.gone = map[uint32]bool{}
	}
	s.gone[pid] = true
}

// AddProcess records process pid as known, named comm, without reading
// /proc or reporting it: for replays of records of processes that do not
// run here.
func (s *Tracker) AddProcess(pid uint32, comm string) {
	if s.procs[pid] == nil {
		s.procs[pid] = &procState{comm: comm, described: true, reported: true}
	}
}
