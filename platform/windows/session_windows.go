//go:build windows && amd64

package windows

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/arch/winunwind"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/win"
	"github.com/rawstack/rawstack/platform"
)

// Tunables.
const (
	defaultStack  = 16 << 10 // stack bytes copied per thread-sample
	batchSize     = 64       // threads per request to the native thread
	refreshPeriod = 100 * time.Millisecond
	maxFrames     = 512
	// syncPollPeriod limits the module snapshots taken because a sample's
	// PC was in no known module.
	syncPollPeriod = 50 * time.Millisecond
	// cpuQuantum is the step by which GetThreadTimes advances: the clock
	// interrupt on Windows (15.625 ms by default), the Linux clock tick
	// under Wine (10 ms). A thread whose CPU time has not moved for
	// longer than two quanta has not run at two clock ticks in a row: it
	// waits (Config.OffCPU).
	cpuQuantum = 16 * time.Millisecond
	waitAfter  = int64(2*cpuQuantum + cpuQuantum/4)
	// waitFlush bounds how long a wait goes unreported: a thread waiting
	// longer is reported in parts of at most this much.
	waitFlush = int64(time.Second)
	// nameTries is how many thread list refreshes (100 ms apart) a thread
	// without a name is asked for one again: threads name themselves
	// after they start.
	nameTries = 10
)

// Session samples one process.
type Session struct {
	cfg     platform.Config
	h       platform.Handler
	pid     uint32
	self    bool
	proc    win.Handle
	cmd     *exec.Cmd
	mainTid uint32 // launched suspended: resumed when Run starts
	waited  chan struct{}
	exitErr error

	win       *window
	samplerID uint32 // the OS thread Run is locked to
	threads   []*thread
	byTid     map[uint32]*thread
	handles   []win.Handle
	batch     []*thread

	mods    map[uint64]*module // by base
	unw     *winunwind.Unwinder
	nextMod uint64
	cookie  uintptr
	dllMu   sync.Mutex
	dllQ    []dllEvent
	dllN    atomic.Int32

	lists chan lists // from the lister goroutine
	// lastModPoll is the time of the last module snapshot: a module a
	// later snapshot finds was loaded after it, and is reported with this
	// time so that samples taken in it before it was seen find it.
	lastModPoll  int64
	lastSyncPoll time.Time
	syncPolled   int64
	qpcFreq      int64
	pcs          []uint64
	ctx          winunwind.Context // the sample being unwound: fields, as the unwinder keeps pointers to them
	mem          stackMem
	sample       platform.Sample
	samples      atomic.Uint64
	onCPU        atomic.Uint64
	lost         atomic.Uint64
	suspended    hist
	closeOnce    sync.Once

	// The on-CPU filter and the achieved rate.
	wallClock  bool  // sample every thread at every tick (tests: the cost the filter saves)
	prevTick   int64 // stream time of the previous round
	ticks      atomic.Uint64
	idleSkips  atomic.Uint64
	cpuNs      atomic.Int64 // on-CPU weight reported
	ranFrom    atomic.Int64 // stream time Run began
	ranTo      atomic.Int64 // stream time of the last round
	threadName bool         // GetThreadDescription exists
}

// lists are the thread and module lists of one Toolhelp32 round. Under
// Wine a thread snapshot takes ~100 ms on a loaded machine, so a goroutine
// takes them and the sampler applies them between ticks.
type lists struct {
	threads []win.Thread
	modules []win.Module
	modErr  error
	taken   int64 // stream time the snapshots began
}

type thread struct {
	tid  uint32
	h    win.Handle
	seen bool
	// cpu is the thread's CPU time (ns) at its last sample; lastRun the
	// stream time of the last round at which it had advanced.
	cpu, lastRun int64
	want         uint8 // what the current batch takes of it: wantCPU or wantWait
	weight       int64 // the CPU ns the sample being taken stands for
	// A waiting thread (Config.OffCPU): its stack, taken once when the
	// wait was seen, and the stream time the unreported part began.
	waiting  bool
	waitFrom int64
	waitPCs  []uint64
	named    bool
	tries    int
}

// What a round takes of a thread.
const (
	wantCPU  = iota + 1 // an on-CPU sample
	wantWait            // the stack of a thread that began to wait
)

type module struct {
	id, base, size uint64
	path           string
	img            *memImage
	uw             *winunwind.Module
	seen           bool
}

// Open starts sampling process cfg.Pid (0: the calling process).
func Open(cfg platform.Config, h platform.Handler) (*Session, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	s := newSession(cfg, h)
	if cfg.Pid == 0 || uint32(cfg.Pid) == win.CurrentProcessID() {
		s.pid, s.self, s.proc = win.CurrentProcessID(), true, win.CurrentProcess()
	} else {
		s.pid = uint32(cfg.Pid)
		p, err := win.OpenProcess(s.pid)
		if err != nil {
			return nil, err
		}
		s.proc = p
	}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Launch starts cmd (not yet started) with its first thread suspended,
// attaches to it and lets it run when [Session.Run] begins. The caller
// must not call cmd.Wait; [Session.ExitErr] reports how it ended.
func Launch(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (*Session, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	s := newSession(cfg, h)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.CreationFlags |= win.CreateSuspended
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s.cmd = cmd
	s.pid = uint32(cmd.Process.Pid)
	p, err := win.OpenProcess(s.pid)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	s.proc = p
	ts, err := win.Threads(s.pid, nil)
	if err != nil || len(ts) == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		win.CloseHandle(p)
		return nil, fmt.Errorf("pid %d: no first thread to resume: %v", s.pid, err)
	}
	s.mainTid = ts[0].Tid
	s.waited = make(chan struct{})
	go func() {
		s.exitErr = cmd.Wait()
		close(s.waited)
	}()
	if err := s.start(); err != nil {
		win.ResumeThreadID(s.mainTid)
		s.Close()
		return nil, err
	}
	return s, nil
}

func newSession(cfg platform.Config, h platform.Handler) *Session {
	if cfg.Frequency <= 0 {
		cfg.Frequency = 99
	}
	if cfg.StackSize <= 0 {
		cfg.StackSize = defaultStack
	}
	cfg.StackSize = min((cfg.StackSize+7)&^7, 1<<20)
	return &Session{cfg: cfg, h: h, byTid: map[uint32]*thread{}, mods: map[uint64]*module{},
		unw: &winunwind.Unwinder{}, qpcFreq: win.QPCFrequency(), pcs: make([]uint64, 0, maxFrames),
		threadName: win.HasThreadNames()}
}

// start creates the native thread, registers for DLL notifications (in
// process, before the enumeration so that no load falls between) and
// reports the process, its threads and modules.
func (s *Session) start() error {
	w, err := newWindow(s.proc, batchSize, s.cfg.StackSize)
	if err != nil {
		return err
	}
	s.win = w
	now := s.now()
	if s.self {
		cookie, err := win.RegisterDLLNotification(s.dllEvent)
		if err != nil {
			return fmt.Errorf("pid %d: LdrRegisterDllNotification: %w", s.pid, err)
		}
		s.cookie = cookie
	}
	name := ""
	if ms, err := win.Modules(s.pid); err == nil && len(ms) > 0 {
		name = filepath.Base(ms[0].Path)
	} else if s.cmd != nil {
		name = filepath.Base(s.cmd.Path)
	}
	if s.self {
		name = filepath.Base(os.Args[0])
	}
	s.h.Process(&format.Process{Time: now, Pid: s.pid, Name: name})
	ms, err := win.Modules(s.pid)
	s.applyModules(ms, err, now)
	s.lastModPoll = now
	ts, err := win.Threads(s.pid, nil)
	if err != nil {
		return err
	}
	s.applyThreads(ts, now)
	return nil
}

// lister takes thread (and, out of process, module) snapshots, each at
// least refreshPeriod after the previous one began and never more than a
// fifth of the time, and hands them to the sampler.
func (s *Session) lister(ctx context.Context) {
	defer close(s.lists)
	for {
		began := time.Now()
		l := lists{taken: s.now()}
		var err error
		if l.threads, err = win.Threads(s.pid, nil); err != nil {
			l.threads = nil
		}
		if !s.self {
			l.modules, l.modErr = win.Modules(s.pid)
		}
		select {
		case s.lists <- l:
		case <-ctx.Done():
			return
		}
		// Under Wine a thread snapshot can take a second on a loaded
		// machine, and wineserver serves the sampler's calls too: rest
		// at least four times as long as the snapshot took.
		took := time.Since(began)
		select {
		case <-time.After(max(refreshPeriod-took, 4*took)):
		case <-ctx.Done():
			return
		}
	}
}

// Pid returns the target's process id.
func (s *Session) Pid() int { return int(s.pid) }

// Event names what is sampled.
func (s *Session) Event() string { return "suspend-sample" }

// ExitErr returns the launched command's exit error, once it has exited.
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

// Stats returns the running totals, with the suspended windows and the
// achieved rate.
func (s *Session) Stats() platform.Stats {
	st := platform.Stats{Samples: s.samples.Load(), Lost: s.lost.Load(),
		Suspensions: s.suspended.n.Load(), SuspendP50: s.suspended.quantile(0.5),
		SuspendP99: s.suspended.quantile(0.99), SuspendMax: s.suspended.max.Load(),
		SuspendTotal: s.suspended.sum.Load(), IdleSkips: s.idleSkips.Load(), AskedHz: s.cfg.Frequency}
	if d := s.ranTo.Load() - s.ranFrom.Load(); d > 0 && s.ranFrom.Load() != 0 {
		st.TickHz = float64(s.ticks.Load()) / (float64(d) / 1e9)
	}
	if cpu := s.cpuNs.Load(); cpu > 0 {
		st.AchievedHz = float64(s.onCPU.Load()) / (float64(cpu) / 1e9)
	}
	return st
}

// now is the stream time: QueryPerformanceCounter in ns.
func (s *Session) now() int64 { return s.qpcNs(win.QPC()) }

func (s *Session) qpcNs(t int64) int64 {
	f := s.qpcFreq
	return t/f*1e9 + t%f*1e9/f
}

// Run samples until ctx is done or the target exits.
func (s *Session) Run(ctx context.Context) error {
	// The sampler's own thread is excluded from sampling; lock it so that
	// it stays the same thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s.samplerID = win.CurrentThreadID()
	if t := s.byTid[s.samplerID]; t != nil {
		s.dropThread(t, s.now())
	}
	if s.mainTid != 0 {
		if err := win.ResumeThreadID(s.mainTid); err != nil {
			return fmt.Errorf("pid %d: resuming thread %d: %w", s.pid, s.mainTid, err)
		}
	}
	period := time.Second / time.Duration(s.cfg.Frequency)
	s.prevTick = s.now()
	s.ranFrom.Store(s.prevTick)
	tk := time.NewTicker(period)
	defer tk.Stop()
	lctx, stopLister := context.WithCancel(ctx)
	defer stopLister()
	s.lists = make(chan lists)
	go s.lister(lctx)
	for {
		select {
		case <-ctx.Done():
			s.flushWaits(s.now())
			return nil
		case <-s.waited:
			s.flushWaits(s.now())
			s.end()
			return nil
		case l := <-s.lists:
			now := s.now()
			if !s.self && win.Exited(s.proc) {
				if s.waited != nil {
					<-s.waited
				}
				s.flushWaits(now)
				s.end()
				return nil
			}
			if !s.self && l.taken > s.syncPolled {
				// (A list older than a snapshot taken since would
				// unload what that snapshot found.)
				s.applyModules(l.modules, l.modErr, s.lastModPoll)
				if l.modErr == nil {
					s.lastModPoll = l.taken
				}
			}
			if l.threads != nil {
				s.applyThreads(l.threads, now)
			}
			continue
		case <-tk.C:
		}
		if s.dllN.Load() > 0 {
			s.drainDLLs()
		}
		s.sampleAll()
	}
}

func (s *Session) end() {
	code := int64(0)
	if c, err := win.ExitCode(s.proc); err == nil {
		code = int64(c)
	}
	s.h.ProcessEnd(&format.ProcessEnd{Time: s.now(), Pid: s.pid, ExitCode: code})
}

// sampleAll is one round. Each thread's CPU time (GetThreadTimes) says
// whether it ran since its last sample: a thread that did is suspended and
// sampled, weighted by the CPU ns it used since; one that did not is left
// alone, so an idle thread costs one query and no suspension. With
// Config.OffCPU a thread whose CPU time has stood still for waitAfter is
// suspended once to take the stack it waits in; its wait is reported as
// an off-CPU sample when it runs again (or after waitFlush, or at the end).
func (s *Session) sampleAll() {
	now := s.now()
	s.batch = s.batch[:0]
	for _, t := range s.threads {
		cpu, ok := win.ThreadCPUTime(t.h)
		if !ok {
			continue // ended: the next refresh reports it
		}
		t.want = 0
		switch {
		case cpu > t.cpu || s.wallClock:
			if t.waiting {
				s.endWait(t, s.prevTick)
			}
			t.want, t.weight, t.cpu, t.lastRun = wantCPU, cpu-t.cpu, cpu, now
		case !s.cfg.OffCPU:
			s.idleSkips.Add(1)
		case !t.waiting && now-t.lastRun >= waitAfter:
			t.want = wantWait
		case t.waiting && now-t.waitFrom >= waitFlush:
			s.endWait(t, now)
			t.waiting, t.waitFrom = true, now
			s.idleSkips.Add(1)
		default:
			s.idleSkips.Add(1)
		}
		if t.want != 0 {
			s.batch = append(s.batch, t)
		}
	}
	for i := 0; i < len(s.batch); i += batchSize {
		b := s.batch[i:min(i+batchSize, len(s.batch))]
		s.handles = s.handles[:0]
		for _, t := range b {
			s.handles = append(s.handles, t.h)
		}
		s.win.run(s.handles)
		for j, t := range b {
			s.emit(j, t)
		}
	}
	s.prevTick = now
	s.ticks.Add(1)
	s.ranTo.Store(now)
}

// endWait reports the wait of t from t.waitFrom to end as an off-CPU
// sample with the stack it waited in, stamped with the time it began.
func (s *Session) endWait(t *thread, end int64) {
	t.waiting = false
	if end <= t.waitFrom {
		return
	}
	s.sample = platform.Sample{Time: t.waitFrom, Pid: s.pid, Tid: t.tid, Weight: uint64(end - t.waitFrom),
		Flags: format.SampleOffCPU, PCs: t.waitPCs}
	s.samples.Add(1)
	s.h.Sample(&s.sample)
}

// flushWaits reports the waits still under way at the end of sampling.
func (s *Session) flushWaits(now int64) {
	for _, t := range s.threads {
		if t.waiting {
			s.endWait(t, now)
		}
	}
}

// emit turns slot j of the last batch into a sample of t.
func (s *Session) emit(j int, t *thread) {
	sl := &s.win.slots[j]
	if sl.status == slotSuspendFailed {
		return // the thread is gone; the next refresh reports it
	}
	s.suspended.add(s.qpcNs(sl.t1 - sl.t0))
	if sl.status != slotOK {
		s.lost.Add(1)
		return
	}
	c, mem := &s.ctx, &s.mem // fields: the unwinder keeps pointers to them during a walk
	if err := winunwind.DecodeContext(s.win.context(j), c); err != nil {
		s.lost.Add(1)
		return
	}
	*mem = stackMem{addr: c.Regs.R[arch.AMD64RSP], data: s.win.stack(j)}
	if !s.self && s.findModule(c.Regs.R[arch.AMD64RIP]) == nil && time.Since(s.lastSyncPoll) > syncPollPeriod {
		// A module loaded since the last poll: look now, while the copy
		// is still here to unwind through it.
		s.lastSyncPoll = time.Now()
		s.syncPolled = s.now()
		ms, err := win.Modules(s.pid)
		s.applyModules(ms, err, s.lastModPoll)
	}
	s.pcs, _ = s.unw.Walk(c, mem, s.pcs[:0], maxFrames)
	if t.want == wantWait {
		// The thread has not run since lastRun: its wait began then.
		t.waitPCs = append(t.waitPCs[:0], s.pcs...)
		t.waiting, t.waitFrom = true, t.lastRun
		return
	}
	s.sample = platform.Sample{Time: s.qpcNs(sl.t0), Pid: s.pid, Tid: t.tid, Weight: uint64(t.weight), PCs: s.pcs}
	if s.cfg.SampleG {
		s.sample.G = c.Regs.R[arch.AMD64R14]
	}
	s.samples.Add(1)
	s.onCPU.Add(1)
	s.cpuNs.Add(t.weight)
	s.h.Sample(&s.sample)
}

// applyThreads brings the thread list up to date with a Toolhelp32
// snapshot: new threads are opened and reported, ended ones closed.
func (s *Session) applyThreads(list []win.Thread, now int64) {
	for _, t := range s.threads {
		t.seen = false
	}
	for _, x := range list {
		if x.Tid == s.samplerID || (s.win != nil && x.Tid == s.win.tid) {
			continue
		}
		if t := s.byTid[x.Tid]; t != nil {
			t.seen = true
			s.nameThread(t, now)
			continue
		}
		h, err := win.OpenThread(x.Tid)
		if err != nil {
			continue
		}
		// The CPU it used before it was seen is no sample's.
		cpu, _ := win.ThreadCPUTime(h)
		t := &thread{tid: x.Tid, h: h, seen: true, cpu: cpu, lastRun: now}
		s.byTid[x.Tid] = t
		s.threads = append(s.threads, t)
		s.h.ThreadStart(&format.ThreadStart{Time: now, Pid: s.pid, Tid: x.Tid})
		s.nameThread(t, now)
	}
	for i := 0; i < len(s.threads); {
		t := s.threads[i]
		if t.seen && !win.Exited(t.h) {
			i++
			continue
		}
		s.dropThread(t, now)
	}
}

// nameThread reports t's name (GetThreadDescription) once it has one,
// asking at most nameTries times.
func (s *Session) nameThread(t *thread, now int64) {
	if t.named || t.tries >= nameTries || !s.threadName {
		return
	}
	t.tries++
	if name := win.ThreadName(t.h); name != "" {
		t.named = true
		s.h.ThreadName(&format.ThreadName{Time: now, Pid: s.pid, Tid: t.tid, Name: name})
	}
}

func (s *Session) dropThread(t *thread, now int64) {
	if t.waiting {
		s.endWait(t, now)
	}
	for i, x := range s.threads {
		if x == t {
			s.threads = append(s.threads[:i], s.threads[i+1:]...)
			break
		}
	}
	delete(s.byTid, t.tid)
	win.CloseHandle(t.h)
	s.h.ThreadEnd(&format.ThreadEnd{Time: now, Pid: s.pid, Tid: t.tid})
}

// Close stops sampling and releases the native thread and the handles.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		if s.cookie != 0 {
			win.UnregisterDLLNotification(s.cookie)
		}
		if s.win != nil {
			s.win.close()
		}
		for _, t := range s.threads {
			win.CloseHandle(t.h)
		}
		s.threads = nil
		if !s.self && s.proc != 0 {
			win.CloseHandle(s.proc)
		}
	})
	return nil
}
