//go:build linux

package tracking

import (
	"fmt"
	"os"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/procinfo"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/cpython"
	"github.com/rawstack/rawstack/platform/linux/procfs"
)

// What a back end's session calls while it opens its events (perf,
// ebpf) and reads its rings.

// ProbePerf checks once that perf_event_open is usable at all; both back
// ends need it. The error wraps platform.ErrNotSupported and says why
// when it is not.
func ProbePerf() error { return probe() }

// BaseAttr is the perf_event_attr of a sampling event of typ and config
// at freq Hz, with the side-band records the Tracker reads.
func BaseAttr(typ uint32, config uint64, freq int, kernel bool) sys.PerfEventAttr {
	return baseAttr(typ, config, freq, kernel)
}

// DecodeRecord decodes rec (one whole record, header included) into r,
// reusing r.PCs' storage.
func DecodeRecord(rec []byte, r *Record) error { return decodeRecord(rec, r) }

// RecordTime returns the time of a record, from its sample_id.
func RecordTime(rec []byte) uint64 { return recordTime(rec) }

// Record types a back end looks at (include/uapi/linux/perf_event.h).
const (
	RecSample = recSample
	RecExit   = recExit
	RecFork   = recFork
)

// Config is the session's configuration; a back end adjusts it to what
// it opened (the frequency the kernel allows).
func (s *Tracker) Config() *platform.Config { return &s.cfg }

// Handler is the handler events are reported to.
func (s *Tracker) Handler() platform.Handler { return s.h }

// SetHandler replaces the handler (replays and benchmarks).
func (s *Tracker) SetHandler(h platform.Handler) { s.h = h }

// SetTarget sets the target process; self says it is this process.
func (s *Tracker) SetTarget(pid int, self bool) { s.pid, s.self = pid, self }

// OpenTarget sets the running process an Open samples: pid, or the
// calling process when pid is 0. A pid that does not exist, or that is a
// kernel thread (no user stack), is an error naming it.
func (s *Tracker) OpenTarget(pid int) error {
	if pid == 0 {
		s.SetTarget(os.Getpid(), true)
		return nil
	}
	s.SetTarget(pid, false)
	if !sys.ProcessAlive(pid) {
		return fmt.Errorf("pid %d: no such process", pid)
	}
	if procinfo.KernelThread(pid) {
		return fmt.Errorf("pid %d (%s): %w", pid, procinfo.Comm(pid), platform.ErrKernelThread)
	}
	return nil
}

// Launched reports whether the target is a command the Tracker started
// (Launch).
func (s *Tracker) Launched() bool { return s.cmd != nil }

// SetKernel records whether kernel frames are recorded.
func (s *Tracker) SetKernel(on bool) { s.kernel = on }

// SetEvent names the perf event sampled.
func (s *Tracker) SetEvent(name string) { s.event = name }

// Unwinder is the online unwinder, nil in frame-pointer mode.
func (s *Tracker) Unwinder() *Unwinder { return s.uw }

// Python reports whether samples' Python frames are read.
func (s *Tracker) Python() bool { return s.py != nil }

// PythonAtSample says that the back end reads the Python frames of
// process pid at the sample from now on (eBPF, once it knows the
// process): a later sample that comes without them and is drained more
// than stale after it was taken gets none read from user space, since
// a back end that drains in batches of up to 100 ms would give every
// sample of a batch the frames of one moment.
func (s *Tracker) PythonAtSample(pid uint32, stale time.Duration) {
	if s.pyAtSampleSince == nil {
		s.pyAtSampleSince = map[uint32]int64{}
	}
	s.pyAtSampleSince[pid] = sys.Monotonic()
	s.pyStale = int64(stale)
}

// PySampling returns the session's Python frame reader, nil when Python
// frames are off.
func (s *Tracker) PySampling() *cpython.Sampling { return s.py }

// PythonStats returns what the Python frame reader did, and the
// interpreters it found but could not read (unknown versions).
func (s *Tracker) PythonStats() (cpython.Stats, []error) {
	if s.py == nil {
		return cpython.Stats{}, nil
	}
	return s.py.Stats(), s.py.Errors()
}

// Goroutines reports whether samples' goroutines are read.
func (s *Tracker) Goroutines() bool { return s.gos != nil }

// BeginAttach starts noting the threads that FORK records report, while
// a back end opens events thread by thread; EndAttach stops.
func (s *Tracker) BeginAttach() { s.forked = map[uint32]bool{} }

// EndAttach stops noting forked threads.
func (s *Tracker) EndAttach() { s.forked = nil }

// Forked reports whether a FORK record reported tid since BeginAttach.
func (s *Tracker) Forked(tid uint32) bool { return s.forked[tid] }

// ThreadName reports tid's name and remembers it.
func (s *Tracker) ThreadName(t int64, pid, tid uint32, name string) {
	s.threadName(t, pid, tid, name)
}

// ReportInitial reports the target, its threads tids and its executable
// mappings as they are now.
func (s *Tracker) ReportInitial(tids []int) { s.reportInitial(tids) }

// ReportLateMappings reports the target's executable mappings made
// between ReportInitial and the enabling of its events, which no mmap
// record announces: a back end that reports before it enables calls it
// after. (A runtime starting up maps its JIT code then: V8's code space
// 50 ms into node's life was missed, and every JavaScript frame in it
// stayed an unnamed address.)
func (s *Tracker) ReportLateMappings() { s.reportMappings(uint32(s.pid), sys.Monotonic(), true) }

// ReportProcess reports process pid, its threads and its executable
// mappings as they are at time now.
func (s *Tracker) ReportProcess(pid int, tids []int, now int64) { s.reportProcess(pid, tids, now) }

// LoadModule reports an executable mapping of pid, unloading what it
// replaces.
func (s *Tracker) LoadModule(t int64, pid uint32, start, end, off, dev, ino uint64, path string, bid []byte) {
	s.loadModule(t, pid, start, end, off, dev, ino, path, bid)
}

// Handle decodes and reports one perf record.
func (s *Tracker) Handle(b []byte) { s.handle(b) }

// Decoded is the record buffer Handle decodes into, for a back end that
// decodes records of its own (with Dispatch and ReportSample after).
func (s *Tracker) Decoded() *Record { return &s.rec }

// Dispatch reports one decoded perf record.
func (s *Tracker) Dispatch(r *Record) { s.dispatch(r) }

// ReportSample reports a sample record (a perf sample, or one a back end
// decoded into the same fields), unwinding its user stack in the DWARF
// modes; flags are added to the sample's.
func (s *Tracker) ReportSample(r *Record, flags format.SampleFlags) { s.reportSample(r, flags) }

// PrepareSample fills [Tracker.SampleBuf] from r and unwinds it; it
// returns false when the sample was dropped.
func (s *Tracker) PrepareSample(r *Record, flags format.SampleFlags) bool {
	return s.prepareSample(r, flags)
}

// SampleBuf is the sample PrepareSample fills.
func (s *Tracker) SampleBuf() *platform.Sample { return &s.sample }

// Report reports a sample and counts it.
func (s *Tracker) Report(sm *platform.Sample) {
	s.samples.Add(1)
	s.h.Sample(sm)
}

// ReportLost reports and counts samples lost.
func (s *Tracker) ReportLost(l *format.Lost) {
	s.lost.Add(l.Count)
	s.h.Lost(l)
}

// CountRecord counts a record read.
func (s *Tracker) CountRecord() { s.records.Add(1) }

// AddBytes counts bytes of records read.
func (s *Tracker) AddBytes(n uint64) { s.bytes.Add(n) }

// TrackJIT starts watching pid's perf map, in whole-host sessions where
// that waits for a process's first sample.
func (s *Tracker) TrackJIT(pid uint32) {
	if s.jit != nil && s.jit.OnDemand {
		s.jit.Track(pid)
	}
}

// System reports whether the session samples every process of the host.
func (s *Tracker) System() bool { return s.system }

// Self reports whether the target is this process.
func (s *Tracker) Self() bool { return s.self }

// BeginRead starts a read of every ring and returns those with a record
// pending (in s.Live's storage); the empty ones are committed. A back
// end's ReadAll then reports the oldest pending record ([Oldest]) and
// moves its ring on ([Tracker.Advance]) until none is left, so that the
// records of different CPUs come out in time order: a mapping reported
// on one CPU precedes the samples taken in it on another.
func (s *Tracker) BeginRead() []*Ring {
	s.js.batch()
	live := s.Live[:0]
	for _, r := range s.Rings {
		if r == nil {
			continue
		}
		r.Begin()
		if r.Pending = r.Next(); r.Pending != nil {
			r.PendingTime = RecordTime(r.Pending)
			live = append(live, r)
		} else {
			s.AddBytes(r.Commit())
		}
	}
	return live
}

// Oldest returns the index of the ring in live whose pending record is
// the oldest, or -1 when live is empty.
func Oldest(live []*Ring) int {
	best := -1
	for i := range live {
		if best < 0 || live[i].PendingTime < live[best].PendingTime {
			best = i
		}
	}
	return best
}

// Advance moves live[i] to its next record; a ring with none left is
// committed and dropped from live, which Advance returns.
func (s *Tracker) Advance(live []*Ring, i int) []*Ring {
	r := live[i]
	if r.Pending = r.Next(); r.Pending != nil {
		r.PendingTime = RecordTime(r.Pending)
		return live
	}
	s.AddBytes(r.Commit())
	live[i] = live[len(live)-1]
	return live[:len(live)-1]
}

// StateSizes counts what a Tracker holds per process and per module
// file. A whole-host session keeps them near the live set however many
// processes it has seen (the regression test of the agent's memory).
type StateSizes struct {
	Procs       int // processes tracked
	UnwindProcs int // processes' unwind views
	UnwindFiles int // module files' unwind tables
	JITProcs    int // processes whose perf maps are watched
}

// StateSizes returns the sizes of s's per-process and per-file state.
// It must not run concurrently with Run.
func (s *Tracker) StateSizes() StateSizes {
	st := StateSizes{Procs: len(s.procs), JITProcs: s.jit.Tracked()}
	if s.uw != nil {
		st.UnwindProcs, st.UnwindFiles = len(s.uw.procs), len(s.uw.files)
	}
	return st
}

// OpenSampling is sys.PerfEventOpen of a frequency-mode event that
// follows the kernel's sampling limit down: the kernel lowers
// kernel.perf_event_max_sample_rate while events are opened when its
// sampling interrupts take too long (a slow or emulated machine), and
// then refuses, with EINVAL, an event asking for more than the new
// limit. The event is opened again at the limit, which attr and the
// session's configuration keep.
func (s *Tracker) OpenSampling(attr *sys.PerfEventAttr, pid, cpu int) (int, error) {
	fd, err := sys.PerfEventOpen(attr, pid, cpu, -1)
	if err != sys.EINVAL || attr.Bits&sys.PerfBitFreq == 0 {
		return fd, err
	}
	max := procfs.SysctlInt("kernel.perf_event_max_sample_rate", 0)
	if max <= 0 || attr.Sample <= uint64(max) {
		return fd, err
	}
	attr.Sample = uint64(max)
	s.cfg.Frequency = max
	return sys.PerfEventOpen(attr, pid, cpu, -1)
}
