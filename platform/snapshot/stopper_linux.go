//go:build linux

package snapshot

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/rawstack/rawstack/internal/procinfo"
	"github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
)

type traceeState uint8

const (
	stateRunning traceeState = iota // seized, not yet seen stopped
	stateStopped
	stateGone // exited or detached
)

type tracee struct {
	tid   int
	state traceeState
	sig   int   // signal to give back at detach
	by    int   // the tracer thread that seized it: 0 the caller's, k helpers[k-1]
	err   error // why the seize failed
	// gregs are the registers (PTRACE_GETREGSET), read as soon as the
	// thread stopped; nil with regsErr set if they could not be read.
	gregs   []uint64
	regsErr error
}

// stopper seizes and stops the threads of a process, reads their
// registers and lets them go.
//
// The ptrace calls are shared among a few tracer threads: the calling
// goroutine's OS thread (which the caller locks) and helpers, each a
// goroutine locked to its own OS thread, since a tracee takes ptrace
// requests only from the thread that seized it. Seizing, interrupting,
// waiting for, reading the registers of and detaching 100 threads is 500
// system calls, most of the time the target stays stopped; two tracer
// threads on two CPUs halve it.
type stopper struct {
	pid int
	dir string
	// tids is the thread list read ahead of the stop (listThreads), so
	// that /proc/PID/task is read once; nil: stopAll reads it.
	tids []int
	// contended says other tasks are waiting for the CPUs (cpuContended):
	// the threads are then stopped from the caller's thread alone.
	contended bool
	tracees   []*tracee
	helpers   []*tracerThread
}

type tracerThread struct {
	work chan func()
	done chan struct{}
}

// minPerTracer is how many threads make another tracer thread worth its
// start (a variable for the tests, which use more tracers on few
// threads); maxTracers caps them.
var minPerTracer = 24

const maxTracers = 4

// ignoreContention makes tracerCount ignore CPU contention (for tests of
// the several-tracer path on a busy machine).
var ignoreContention = false

// tracerCount returns how many tracer threads stop n threads; one where
// the CPUs are contended. A second tracer thread then finds no idle CPU:
// on 2 cores with other jobs running (CPU pressure 40-65%), a 100-thread
// snapshot kept its threads stopped as long with one tracer as with two
// (3.08 and 3.15 ms, 40 alternating runs), and took 1-4% less time end
// to end and 2-6% less CPU (median ratios of four runs of 61-151
// alternating pairs); the thread a second tracer needs is not started.
func tracerCount(n int, contended bool) int {
	if contended && !ignoreContention {
		return 1
	}
	return max(1, min(runtime.NumCPU(), maxTracers, n/minPerTracer))
}

// contendedPressure is the share of the last 10 s, in percent, in which
// some task waited for a CPU (/proc/pressure/cpu "some avg10") from which
// on the CPUs count as contended.
const contendedPressure = 10

// cpuContended reports whether tasks have been waiting for the CPUs
// (Linux pressure stall information); false where it is not available.
func cpuContended() bool {
	var b [256]byte
	n, err := unix.ReadSmall("/proc/pressure/cpu", b[:])
	if err != nil {
		return false
	}
	v, ok := someAvg10(b[:n])
	return ok && v >= contendedPressure
}

// someAvg10 returns the "some avg10" figure of a /proc/pressure file:
// "some avg10=37.65 avg60=55.61 avg300=64.79 total=6110048831".
func someAvg10(b []byte) (float64, bool) {
	_, rest, ok := strings.Cut(string(b), "some avg10=")
	if !ok {
		return 0, false
	}
	if i := strings.IndexAny(rest, " \n"); i >= 0 {
		rest = rest[:i]
	}
	v, err := strconv.ParseFloat(rest, 64)
	return v, err == nil
}

// listThreads returns the thread ids of /proc/PID (dir), in the order
// the kernel lists them (the main thread first).
func listThreads(dir string) ([]int, error) {
	f, err := os.Open(dir + "/task")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// onAll runs f(w) for every tracer thread w at once, f(0) on the
// caller's, and returns when all are done.
func (s *stopper) onAll(f func(w int)) {
	for k, h := range s.helpers {
		h.work <- func() { f(k + 1) }
	}
	f(0)
	for _, h := range s.helpers {
		<-h.done
	}
}

func (s *stopper) stopAll() error {
	tids := s.tids
	if tids == nil {
		var err error
		if tids, err = listThreads(s.dir); err != nil {
			return fmt.Errorf("snapshot: threads of pid %d: %w", s.pid, err)
		}
	}
	seen := make(map[int]bool, len(tids))
	nw := tracerCount(len(tids), s.contended)
	for _, tid := range tids {
		if !seen[tid] {
			seen[tid] = true
			s.tracees = append(s.tracees, &tracee{tid: tid, by: len(s.tracees) % nw})
		}
	}
	for range nw - 1 {
		h := &tracerThread{work: make(chan func()), done: make(chan struct{})}
		s.helpers = append(s.helpers, h)
		go func() {
			runtime.LockOSThread()
			for f := range h.work {
				f()
				h.done <- struct{}{}
			}
			runtime.UnlockOSThread()
		}()
	}
	// Each tracer thread seizes and interrupts its share, then waits for
	// each to stop and reads its registers.
	s.onAll(func(w int) {
		for _, tr := range s.tracees {
			if tr.by == w {
				s.seize(tr)
			}
		}
		for _, tr := range s.tracees {
			if tr.by == w && tr.state == stateRunning {
				s.wait(tr)
			}
		}
	})
	if err := s.seizeErr(s.tracees); err != nil {
		return err
	}
	// Threads created after the listing, by threads not yet stopped, are
	// caught here: once the threads seen are stopped, the kernel's count
	// says whether there are others, and only then is the list read again
	// (on the caller's thread; rare).
	for round := 1; round < maxSeizeRounds; round++ {
		alive := 0
		for _, tr := range s.tracees {
			if tr.state == stateStopped {
				alive++
			}
		}
		if n := threadCount(s.dir); n > 0 && n == alive {
			break
		}
		tids, err := listThreads(s.dir)
		if err != nil {
			break
		}
		var added []*tracee
		for _, tid := range tids {
			if !seen[tid] {
				seen[tid] = true
				tr := &tracee{tid: tid}
				s.tracees = append(s.tracees, tr)
				added = append(added, tr)
				s.seize(tr)
			}
		}
		if len(added) == 0 {
			break
		}
		for _, tr := range added {
			if tr.state == stateRunning {
				s.wait(tr)
			}
		}
		if err := s.seizeErr(added); err != nil {
			return err
		}
	}
	return nil
}

// seize seizes and interrupts tr; on failure tr is gone and tr.err says
// why (nil if the thread exited meanwhile).
func (s *stopper) seize(tr *tracee) {
	if err := unix.PtraceSeize(tr.tid); err != nil {
		tr.state = stateGone
		if err != unix.ESRCH { // ESRCH: exited since the listing
			tr.err = err
		}
		return
	}
	if err := unix.PtraceInterrupt(tr.tid); err != nil {
		if err == unix.ESRCH {
			tr.state = stateGone
			return
		}
		tr.err = fmt.Errorf("snapshot: ptrace interrupt of tid %d: %w", tr.tid, err)
	}
}

// seizeErr returns the error of the first of trs whose seize failed, if
// any matters: an EPERM while other threads could be seized is a thread
// exiting (the credentials are fine; the kernel refuses an exiting
// thread), not an error.
func (s *stopper) seizeErr(trs []*tracee) error {
	any := false
	for _, tr := range s.tracees {
		if tr.err == nil && tr.state != stateGone {
			any = true
			break
		}
	}
	for _, tr := range trs {
		err := tr.err
		if err == nil {
			continue
		}
		if errno, ok := err.(syscall.Errno); !ok {
			return err // from the interrupt, already wrapped
		} else if errno != unix.EPERM {
			return fmt.Errorf("snapshot: ptrace seize of tid %d: %w", tr.tid, err)
		}
		if any && tracerPid(s.dir+"/task/"+strconv.Itoa(tr.tid)) == 0 {
			continue
		}
		if tp, name := procinfo.Tracer(tr.tid); tp != 0 && tp != os.Getpid() {
			return &platform.TracedError{Pid: s.pid, Tid: tr.tid, Tracer: tp, TracerName: name}
		}
		return &platform.PermissionError{
			Op:   fmt.Sprintf("snapshot: ptrace seize of pid %d tid %d", s.pid, tr.tid),
			Need: "CAP_SYS_PTRACE, or the same user with kernel.yama.ptrace_scope=0, and no other tracer",
			Err:  err,
		}
	}
	return nil
}

// wait waits for a seized, interrupted thread to stop and reads its
// registers.
func (s *stopper) wait(tr *tracee) {
	ts, err := unix.WaitTid(tr.tid)
	switch {
	case err != nil || ts.Exited:
		tr.state = stateGone
		return
	case ts.Event == 0:
		// A signal-delivery-stop came first: the signal is given back at
		// detach so the target does not lose it.
		tr.state, tr.sig = stateStopped, ts.Sig
	default:
		tr.state = stateStopped
	}
	var gregs [64]uint64
	n, err := unix.PtraceGetRegSet(tr.tid, gregs[:])
	if err != nil {
		tr.regsErr = err
		return
	}
	tr.gregs = append([]uint64(nil), gregs[:n]...)
}

// release detaches from every thread, stopping first any seized thread
// not yet seen stopped (PTRACE_DETACH needs a stopped tracee), each from
// the tracer thread that seized it, and ends the helper threads. It may
// be called more than once.
func (s *stopper) release() {
	if len(s.tracees) == 0 && len(s.helpers) == 0 {
		return
	}
	s.onAll(func(w int) {
		for _, tr := range s.tracees {
			if tr.by != w {
				continue
			}
			if tr.state == stateRunning {
				if unix.PtraceInterrupt(tr.tid) != nil {
					tr.state = stateGone
					continue
				}
				s.wait(tr)
			}
			if tr.state == stateStopped {
				unix.PtraceDetachSignal(tr.tid, tr.sig)
				tr.state = stateGone
			}
		}
	})
	for _, h := range s.helpers {
		close(h.work)
	}
	s.helpers = nil
}
