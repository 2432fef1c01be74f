//go:build linux && (amd64 || arm64)

package ebpf

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rawstack/rawstack/platform/linux/allocshim"
	"github.com/rawstack/rawstack/platform/linux/cpython"

	"github.com/rawstack/rawstack/format"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/procfs"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// Record layout written by the BPF programs (bpf/rawstack.bpf.c),
// which the allocation sampler writes too: package tracking's sample
// records.
const (
	bpfHdrSize   = tracking.SampleHdrSize
	bpfNRegs     = tracking.SampleNRegs
	bpfKernelOff = tracking.SampleKernelOff
	bpfMaxStack  = tracking.MaxSampleStack // MAX_STACK in bpf/rawstack.bpf.c; platform/linux.checkConfig refuses a StackSize above it

	bpfKindCPU    = 1
	bpfKindOffCPU = 2 // a thread left the CPU: its stack
	bpfKindOnCPU  = 3 // it came back: header only

	maxOffPending = 1 << 16 // threads off CPU whose stacks are held

	bpfFlagRegs = tracking.SampleFlagRegs

	bpfRingBytes = 4 << 20 // default BPF ring buffer size
	sidePages    = 64      // per-CPU perf ring for mmap/comm/fork/exit records of the whole host
)

// Session samples with the BPF programs: one target and its
// descendants, or every process of the host (Config.System). Its
// [tracking.Tracker] follows processes, threads and modules from the
// side-band records of the same perf events' rings and unwinds samples
// as the perf back end's does.
type Session struct {
	*tracking.Tracker
	bpf *bpfState
}

// bpfState is what the eBPF back end reads besides the perf rings.
type bpfState struct {
	progs *programs
	rec   []byte // the record Next returned, until reported

	pending     bool   // rec holds a record not yet reported
	pendingTime uint64 // its time for merging
	lost        uint64 // BPF-side drops reported so far: ring buffer full
	lostOff     uint64 // and off-CPU start map full
	lostAt      int64  // when ReadAll last read the counts (Monotonic)
	ringBytes   uint64 // BPF ring buffer bytes read (records without their 8-byte headers)

	// Off CPU: the unwound stack of each thread that left the CPU,
	// until it comes back; entries are reused.
	offPending map[uint32]*offStack
	offFree    []*offStack

	// shim is the allocation sampler's file that a launched command
	// preloads (Config.Alloc: the Tracker records allocations).
	shim string
	h    platform.Handler
}

type offStack struct {
	time  uint64
	pid   uint32
	cpu   uint32
	flags format.SampleFlags
	g     uint64
	pcs   []uint64
}

func (b *bpfState) close() {
	if b.progs != nil {
		b.progs.Close()
		b.progs = nil
	}
}

var (
	bpfProbeOnce sync.Once
	bpfProbeErr  error
)

// Probe reports whether the eBPF back end can run here: the kernel
// features it uses (BTF, ring buffers, perf-event and tracing programs)
// and the capabilities it needs. The error wraps platform.ErrNotSupported
// for a missing kernel feature, and is a *platform.PermissionError naming
// the capabilities for missing privileges.
func Probe() error {
	bpfProbeOnce.Do(func() { bpfProbeErr = probeBPF() })
	return bpfProbeErr
}

func probeBPF() error {
	caps, err := sys.CapEff()
	if err == nil {
		has := func(c uint) bool { return caps&(1<<c) != 0 }
		if !has(sys.CapSysAdmin) && !(has(sys.CapBPF) && has(sys.CapPerfmon)) {
			var miss []string
			if !has(sys.CapBPF) {
				miss = append(miss, "CAP_BPF")
			}
			if !has(sys.CapPerfmon) {
				miss = append(miss, "CAP_PERFMON")
			}
			return &platform.PermissionError{Op: "loading eBPF programs", Need: strings.Join(miss, " and ") + " (or CAP_SYS_ADMIN, e.g. root)", Err: sys.EPERM}
		}
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return &platform.NotSupportedError{Feature: "eBPF back end", Reason: "the kernel has no BTF (/sys/kernel/btf/vmlinux; CONFIG_DEBUG_INFO_BTF=y is needed for CO-RE)"}
	}
	return probeFeatures()
}

// Open starts sampling the running process cfg.Pid (0: the caller), or
// every process of the host with cfg.System.
func Open(cfg platform.Config, h platform.Handler) (*Session, error) {
	s := newSession(cfg, h)
	if cfg.System {
		s.WholeHost()
	} else if err := s.OpenTarget(cfg.Pid); err != nil {
		return nil, err
	}
	if err := s.attach(); err != nil {
		return nil, err
	}
	return s, nil
}

// Launch starts cmd (not yet started) stopped at its first instruction,
// attaches to it and lets it run. The caller must not call cmd.Wait: the
// session reaps the command; [tracking.Tracker.ExitErr] reports how it
// ended.
//
// With cfg.Alloc, the command gets the allocation sampler preloaded
// (package allocshim, through LD_PRELOAD), which samples in the process:
// the recorder's uprobes are on the sampler's two markers instead of on
// every allocator call. Where the sampler is not built (arm64), the
// uprobes are on the command's allocator, as for a running process.
func Launch(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (*Session, error) {
	s := newSession(cfg, h)
	if cfg.Alloc && allocshim.Built {
		if err := s.EnableAlloc("ebpf"); err != nil {
			return nil, err
		}
		if err := s.preload(cmd); err != nil {
			return nil, err
		}
	}
	if err := s.Launch(cmd, s.attach, s.Close); err != nil {
		return nil, err
	}
	return s, nil
}

func newSession(cfg platform.Config, h platform.Handler) *Session {
	s := &Session{Tracker: tracking.New(cfg, h), bpf: &bpfState{h: h}}
	// The BPF programs wake the reader only when their ring fills
	// (a quarter of it): reads come from this timeout, in batches.
	s.PollInterval = bpfReadInterval
	return s
}

// pyStale is how long after its sample a sample's Python frames may be
// read from user space (before the program knows the thread): later, a
// batch of samples would all get one moment's frames.
const pyStale = 5 * time.Millisecond

// hostRingBytes sizes the BPF ring buffer of a whole-host session for
// on-CPU samples only: a quarter of a second of the largest records
// (every frame, the whole stack copy) of every CPU at hz, as a power of
// two between 256 KiB and bpfRingBytes. Its pages are all resident once
// the ring has wrapped, twice counted in the RSS (the kernel maps the data
// twice): a 20 Hz daemon on a small host needs far less than 4 MiB.
func hostRingBytes(cpus, hz, stackBytes int) int {
	per := bpfKernelOff + 8*2*127 + stackBytes
	need := max(cpus, 1) * max(hz, 1) * per / 4
	n := 256 << 10
	for n < need && n < bpfRingBytes {
		n *= 2
	}
	return n
}

// bpfReadInterval is how often an eBPF session reads its rings. Every
// wakeup of a Go program costs a round of its scheduler and a millisecond
// of sysmon polling; samples need no lower latency than this.
const bpfReadInterval = 100 * time.Millisecond

// jitReadInterval is the read interval of a recording while it names a
// process's JIT frames from V8's or HotSpot's metadata.
const jitReadInterval = 10 * time.Millisecond

// hostReadInterval is bpfReadInterval of a whole-host session. Its
// reader is woken at once by the first sample of each process (to read
// the process's attributes from /proc while it lives) and when a quarter
// of a ring is used, and by nothing else: the timer only bounds how long
// a quiet host's records wait. Ten reads a second cost the agent 45% of
// its CPU time (issue 22).
const hostReadInterval = time.Second

// hostJITWake is how soon after the last such wakeup a sample of a
// process that runs V8 wakes a whole-host session's reader. The reader
// names its JavaScript frames from V8's heap as the heap is when the
// sample is read; at the once-a-second reads of a whole-host session,
// V8 had replaced the code of one sample in five of node's hot chain
// (shop.js's chain named whole in 71-83% against a recording's 87-91%;
// 86-89% with a 20 ms cap, 85-86% with this one). A wakeup costs the
// agent's Go scheduler a round, and the agent at its 19 Hz with one busy
// node thread is woken about 10 times a second at this cap, 19 at 20 or
// 50 ms.
const hostJITWake = 100 * time.Millisecond

// Run reads the rings and reports events until ctx is done or the target
// is gone, then reads what is left and returns.
func (s *Session) Run(ctx context.Context) error {
	err := s.Tracker.Run(ctx, s.ReadAll)
	if s.bpf.progs != nil {
		s.reportBPFLost()
	}
	return err
}

// Close stops sampling and releases the programs, events and rings (an
// injected allocation sampler is detached first).
func (s *Session) Close() error {
	s.DetachSampler()
	s.bpf.close()
	return s.Tracker.Close()
}

// attach loads the BPF programs, opens one cpu-clock perf event per CPU
// for them (whose rings carry the mmap, comm, fork and exit records the
// perf back end reads too), reports the current state and starts sampling.
func (s *Session) attach() (err error) {
	if err := tracking.ProbePerf(); err != nil {
		return err
	}
	if err := Probe(); err != nil {
		return err
	}
	s.SetKernel(!s.Config().NoKernel)
	s.SetEvent("cpu-clock")
	b := s.bpf
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

	spec := bpfSpec{All: s.System(), CopyStack: s.Unwinder() != nil, SelfPid: os.Getpid(), RingBytes: bpfRingBytes, OffCPU: s.Config().OffCPU}
	if s.Unwinder() != nil {
		if !s.System() {
			// One program: --unwind auto samples one that keeps frame
			// pointers (Go without cgo) by the frame-pointer walk the
			// program takes anyway, with a 512-byte window for the
			// leaf, as the perf back end does.
			s.Unwinder().ChooseAuto(s.Pid())
		}
		spec.StackBytes = s.Unwinder().StackBytes()
	}
	if s.Config().RingPages > 0 {
		spec.RingBytes = s.Config().RingPages * sys.PageSize
		for spec.RingBytes&(spec.RingBytes-1) != 0 {
			spec.RingBytes &= spec.RingBytes - 1
		}
	} else if s.System() && !s.Config().OffCPU && !s.Config().Alloc {
		spec.RingBytes = hostRingBytes(len(procfs.OnlineCPUs()), s.Config().Frequency, spec.StackBytes)
	}
	// Samples are read in batches: every bpfReadInterval (100 ms),
	// or when a quarter of the ring is used (a wakeup per sample cost the
	// recorder a third of its CPU time).
	spec.WakeupBytes = spec.RingBytes / 4
	if s.System() {
		spec.WakeNew = true
		s.PollInterval = hostReadInterval
		spec.JITWake = int64(hostJITWake)
	} else {
		// A recording of node or a JVM: their frames are named from
		// their heaps when read, 100 ms after the sample at worst (a
		// third of node's optimized code was replaced by then, its
		// frames left anonymous: 90-95% named against the perf back
		// end's 99%, which reads every few samples).
		s.JITInterval = jitReadInterval
	}
	if s.Config().Alloc {
		if !s.Allocs() {
			if err := s.EnableAlloc("ebpf"); err != nil {
				return err
			}
		}
		spec.AllocRate = s.AllocRate()
	}
	spec.Python = s.Python()
	spec.GoRegs = s.Unwinder() == nil && s.Decoded().UserRegsMask != 0
	b.progs, err = load(spec)
	if err != nil {
		return err
	}
	if py := s.PySampling(); py != nil {
		// Each CPython process found goes to the cpu-clock program,
		// which reads its threads' frames at their samples.
		progs := b.progs
		py.SetOnProcess(func(pid uint32, w cpython.Walk) {
			if progs.SetPyProcess(pid, w) == nil && w.Runtime != 0 {
				s.PythonAtSample(pid, pyStale)
			}
		})
		py.SetOnThread(func(_, tid uint32, tstate, gil uint64) { progs.SetPyThread(tid, tstate, gil) })
	}
	if spec.JITWake != 0 {
		progs := b.progs
		s.OnV8 = func(pid uint32) { progs.SetV8Process(pid) }
	}
	if !s.System() {
		if err := b.progs.Select(uint32(s.Pid())); err != nil {
			return err
		}
	}
	if s.Allocs() && b.shim != "" {
		if err := allocshim.Preloadable(s.Pid()); err != nil {
			return err
		}
		if err := b.progs.attachShim(b.shim); err != nil {
			return err
		}
	} else if s.Allocs() && s.System() {
		lib, err := hostLibc()
		if err != nil {
			return err
		}
		if err := b.progs.attachAlloc(lib, 0); err != nil {
			return err
		}
	}

	// One cpu-clock event per CPU, system-wide.
	attr := sys.PerfEventAttr{
		Type:        sys.PerfTypeSoftware,
		Config:      sys.PerfCountSWCPUClock,
		Sample:      uint64(s.Config().Frequency),
		Sample_type: sys.PerfSampleTID | sys.PerfSampleTime | sys.PerfSampleCPU,
		Bits: sys.PerfBitDisabled | sys.PerfBitFreq | sys.PerfBitMmap | sys.PerfBitMmap2 | sys.PerfBitComm |
			sys.PerfBitTask | sys.PerfBitSampleIDAll | sys.PerfBitCommExec | sys.PerfBitUseClockID | sys.PerfBitExcludeHv,
		Clockid: sys.ClockMonotonic,
	}
	if max := procfs.SysctlInt("kernel.perf_event_max_sample_rate", 100000); max > 0 && s.Config().Frequency > max {
		attr.Sample = uint64(max)
		s.Config().Frequency = max
	}
	prog := b.progs.PerfProgramFD()
	cpus := procfs.OnlineCPUs()
	s.Rings = make([]*tracking.Ring, len(cpus))
	for i, cpu := range cpus {
		fd, err := s.OpenSampling(&attr, -1, cpu)
		if err != nil {
			if err == sys.EACCES || err == sys.EPERM {
				return &platform.PermissionError{Op: fmt.Sprintf("perf_event_open on cpu %d (all processes)", cpu), Need: "CAP_PERFMON (or CAP_SYS_ADMIN)", Err: err}
			}
			return fmt.Errorf("perf_event_open on cpu %d: %w", cpu, err)
		}
		s.FDs = append(s.FDs, fd)
		r, err := tracking.MapRing(fd, sidePages)
		if err != nil {
			return fmt.Errorf("mmap of the perf ring buffer of cpu %d: %w", cpu, err)
		}
		s.Rings[i] = r
		s.Polls = append(s.Polls, sys.PollFd{Fd: int32(fd), Events: sys.POLLIN})
		if err := sys.PerfSetBPF(fd, prog); err != nil {
			return fmt.Errorf("attaching the BPF program to the perf event of cpu %d: %w", cpu, err)
		}
	}
	s.Polls = append(s.Polls, sys.PollFd{Fd: int32(b.progs.RingFD()), Events: sys.POLLIN})

	// Side-band records from now on; then what exists already.
	for _, fd := range s.FDs {
		if err := sys.PerfEnable(fd); err != nil {
			return fmt.Errorf("enabling perf event: %w", err)
		}
	}
	if s.System() {
		s.reportAll()
	} else {
		tids, err := procfs.Tasks(s.Pid())
		if err != nil {
			return fmt.Errorf("pid %d: listing threads: %w", s.Pid(), err)
		}
		s.ReportInitial(tids)
	}
	if s.Config().OffCPU {
		b.offPending = map[uint32]*offStack{}
	}
	if s.Allocs() && b.shim == "" && !s.System() {
		// A running process: the sampler injected (after the process
		// and its modules are reported, so that its first samples
		// have them), or where it cannot be, uprobes on its allocator.
		if err := s.allocAttach(); err != nil {
			return err
		}
	}
	return b.progs.Start()
}

// reportAll reports every process of the host as it is now.
func (s *Session) reportAll() {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	now := sys.Monotonic()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		tids, err := procfs.Tasks(pid)
		if err != nil {
			continue // exited meanwhile
		}
		s.ReportProcess(pid, tids, now)
	}
}

// ReadAll reads and reports the perf rings' side-band records and the BPF
// ring buffer's samples, merged by time. Samples stamped after the rings
// were looked at wait for the next call: the mapping a sample needs may
// be in a ring record written meanwhile.
func (s *Session) ReadAll() {
	b := s.bpf
	until := uint64(sys.Monotonic())
	live := s.BeginRead()
	if b.progs == nil {
		return
	}
	if !b.pending {
		b.next()
	}
	s.BeginAllocRead()
	for {
		bpfOK := b.pending && b.pendingTime < until
		ringTime, ringOK := s.AllocPending(until)
		if len(live) == 0 && !bpfOK && !ringOK {
			break
		}
		best := tracking.Oldest(live)
		if ringOK && (!bpfOK || ringTime < b.pendingTime) && (best < 0 || ringTime <= live[best].PendingTime) {
			s.ReportAllocRecord()
			continue
		}
		if bpfOK && (best < 0 || b.pendingTime <= live[best].PendingTime) {
			s.handleBPF(b.rec)
			b.next()
			continue
		}
		if best < 0 {
			break
		}
		s.handleSide(live[best].Pending)
		live = s.Advance(live, best)
	}
	s.Live = live
	// A map lookup per CPU: every lostReadInterval at most (a whole-host
	// session reads at each new process's first sample); Run reports
	// them once more at the end.
	if now := sys.Monotonic(); now-b.lostAt >= int64(lostReadInterval) {
		b.lostAt = now
		s.reportBPFLost()
	}
}

// lostReadInterval is how often ReadAll reads the BPF programs' drop
// counters.
const lostReadInterval = time.Second

// next reads the BPF ring's next record into b.rec.
func (b *bpfState) next() {
	b.pending = false
	rec, ok := b.progs.Next()
	if !ok || len(rec) < bpfHdrSize {
		return
	}
	b.pending, b.rec = true, rec
	h := rec
	b.pendingTime = binary.LittleEndian.Uint64(h[16:])
	if binary.LittleEndian.Uint32(h) == bpfKindOnCPU {
		b.pendingTime += binary.LittleEndian.Uint64(h[24:]) // written when the thread came back
	}
}

// BPFRingBytes returns how many bytes of records the session has read
// from the BPF ring buffer (headers excluded): divided by Stats().Samples,
// what each sample moves.
func (s *Session) BPFRingBytes() uint64 {
	if s.bpf == nil {
		return 0
	}
	return s.bpf.ringBytes
}

// reportBPFLost reports the samples the BPF programs could not write.
func (s *Session) reportBPFLost() {
	b := s.bpf
	ring, off, alloc := b.progs.Lost()
	s.ReportAllocDrops(alloc)
	s.reportNewLost(ring, &b.lost, format.LostRingOverflow)
	// Threads off CPU whose start the map had no room for.
	s.reportNewLost(off, &b.lostOff, format.LostUnknown)
}

// reportNewLost reports the drops of a running count n beyond those
// reported so far (*seen), and moves *seen up to n.
func (s *Session) reportNewLost(n uint64, seen *uint64, reason format.LostReason) {
	if n > *seen {
		s.ReportLost(&format.Lost{Time: sys.Monotonic(), Count: n - *seen, Reason: reason})
		*seen = n
	}
}

// handleSide reports a side-band perf record, in single-process mode only
// those of the target and its descendants.
func (s *Session) handleSide(rec []byte) {
	r := s.Decoded()
	if err := tracking.DecodeRecord(rec, r); err != nil {
		return
	}
	if r.Type == tracking.RecExit && s.bpf.offPending != nil {
		if o := s.bpf.offPending[r.Tid]; o != nil {
			delete(s.bpf.offPending, r.Tid)
			s.bpf.offFree = append(s.bpf.offFree, o)
		}
	}
	if !s.System() {
		switch {
		case r.Type == tracking.RecFork && r.Pid != r.Ppid:
			if !s.Known(r.Ppid) {
				return
			}
		case !s.Known(r.Pid):
			return
		}
	}
	s.Dispatch(r)
}

// handleBPF reports one BPF sample record.
func (s *Session) handleBPF(b []byte) {
	s.AddBytes(uint64(len(b)))
	s.bpf.ringBytes += uint64(len(b))
	if len(b) == bpfHdrSize {
		switch binary.LittleEndian.Uint32(b) {
		case bpfKindOnCPU:
			s.onCPU(b)
			return
		case bpfKindAllocRet:
			s.allocReturn(b)
			return
		case bpfKindFree:
			s.allocFree(b)
			return
		}
	}
	r := s.Decoded()
	kind, err := tracking.DecodeSampleRecord(b, r)
	if err != nil {
		// Not a layout the programs write: a mismatch between the
		// embedded object and this decoder. Counted, not silent.
		s.ReportLost(&format.Lost{Time: sys.Monotonic(), Count: 1, Reason: format.LostUnknown})
		return
	}
	s.CountRecord()
	s.EnsureProcess(r.Pid, int64(r.Time))
	if r.Pid != 0 {
		s.TrackJIT(r.Pid)
	}
	if !s.KernelFrames() && r.Kernel {
		r.PCs = r.PCs[binary.LittleEndian.Uint16(b[32:]):]
		r.Kernel = false
	}
	switch kind {
	case bpfKindCPU:
		s.ReportSample(r, 0)
	case bpfKindOffCPU:
		s.offCPU(r)
	case bpfKindAlloc:
		s.AllocEnter(r)
	}
}

// offCPU unwinds the stack of a thread that left the CPU and holds it
// until the thread comes back.
func (s *Session) offCPU(r *tracking.Record) {
	b := s.bpf
	if b.offPending == nil || !s.PrepareSample(r, format.SampleOffCPU) {
		return
	}
	o := b.offPending[r.Tid]
	if o != nil {
		// The thread left the CPU again, so it came back in between,
		// but no record said when: that interval's weight is unknown.
		// Counted, not dropped silently (TestEBPFOffCPU has seen this,
		// rarely, on a loaded host).
		s.ReportLost(&format.Lost{Time: int64(o.time), Pid: o.pid, Count: 1, Reason: format.LostUnknown})
	}
	if o == nil {
		if len(b.offPending) >= maxOffPending {
			s.ReportLost(&format.Lost{Time: int64(r.Time), Pid: r.Pid, Count: 1, Reason: format.LostUnknown})
			return
		}
		if n := len(b.offFree); n > 0 {
			o, b.offFree = b.offFree[n-1], b.offFree[:n-1]
		} else {
			o = &offStack{}
		}
		b.offPending[r.Tid] = o
	}
	sm := s.SampleBuf()
	o.time, o.pid, o.cpu, o.flags, o.g = uint64(sm.Time), sm.Pid, sm.CPU, sm.Flags, sm.G
	o.pcs = append(o.pcs[:0], sm.PCs...)
}

// onCPU reports the off-CPU sample of a thread that came back: the stack
// it left with, weighted by the nanoseconds it was away.
func (s *Session) onCPU(h []byte) {
	b := s.bpf
	le := binary.LittleEndian
	tid, start, weight := le.Uint32(h[8:]), le.Uint64(h[16:]), le.Uint64(h[24:])
	o := b.offPending[tid]
	if o == nil {
		return // its stack record was lost (and counted) or dropped
	}
	delete(b.offPending, tid)
	b.offFree = append(b.offFree, o)
	if o.time != start {
		return // a stack from another switch: its record was lost
	}
	sm := s.SampleBuf()
	*sm = platform.Sample{Time: int64(start), Pid: o.pid, Tid: tid, CPU: o.cpu, Weight: weight, Flags: o.flags, PCs: o.pcs, G: o.g}
	s.Report(sm)
}
