//go:build linux

package snapshot

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/procinfo"
	"github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/cpython"
)

// readAhead is how many pages a stack read fetches at once.
const readAhead = 2

// maxSeizeRounds bounds how often the thread list is re-read to catch
// threads created while the others were being stopped.
const maxSeizeRounds = 8

// Process snapshots the stacks of every thread of the live process pid.
// The threads are stopped with PTRACE_SEIZE + PTRACE_INTERRUPT (no
// SIGSTOP is sent) while their registers are read and their stacks
// unwound, then detached, on every path, errors and panics included; a
// signal that arrived meanwhile is delivered at detach, and a process that
// was stopped stays stopped. Snapshot.Stopped says how long it took.
// Threads that exit meanwhile are left out; new ones are looked for until
// the thread list is stable.
func Process(pid int, opts *Options) (*Snapshot, error) {
	if err := checkTarget("snapshot", pid); err != nil {
		return nil, err
	}
	dir := "/proc/" + strconv.Itoa(pid)
	mapsText, err := os.ReadFile(dir + "/maps")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("snapshot: no process %d", pid)
		}
		return nil, fmt.Errorf("snapshot: pid %d: %w", pid, err)
	}
	if procinfo.KernelThread(pid) {
		return nil, fmt.Errorf("snapshot: pid %d (%s): %w", pid, procinfo.Comm(pid), platform.ErrKernelThread)
	}
	maps, err := parseMaps(mapsText)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %s/maps: %w", dir, err)
	}
	snap := &Snapshot{Pid: pid, Arch: hostArch, Name: readComm(dir)}
	if b, err := os.ReadFile(dir + "/cmdline"); err == nil {
		snap.Cmdline = strings.TrimRight(string(b), "\x00")
	}

	// Modules are read before anything stops: file I/O and table parsing
	// do not need the target stopped.
	cache := opts.tables()
	preMem := newLiveMem(pid, maps)
	defer preMem.close()
	pre := newPageCache(readAhead, preMem.fill)
	root := dir + "/root"
	open := func(m *mapping) string {
		if strings.HasSuffix(m.Path, " (deleted)") {
			return fmt.Sprintf("%s/map_files/%x-%x", dir, m.Start, m.End)
		}
		if _, err := os.Stat(root + m.Path); err == nil {
			return root + m.Path
		}
		return ""
	}
	image := func(start, end uint64) []byte {
		if end-start > 1<<20 {
			return nil
		}
		b := make([]byte, end-start)
		if pre.ReadMemory(start, b) != nil {
			return nil
		}
		return b
	}
	// Modules load (the distinct files on as many goroutines as there are
	// CPUs) and the buffer the stacks will be read into is allocated and
	// faulted in, before any thread stops. None of it needs the target
	// stopped, and overlapping it with the stop does not pay: the target's
	// threads must run to enter their stop, and on a machine with few
	// cores this work takes the CPUs they need (100 threads stayed stopped
	// a median 16 ms with it overlapped, 9 ms with it done first; end to
	// end the same: 15 and 21 interleaved runs, 2 cores, load ~5).
	bufc := make(chan []byte, 1)
	go func() { bufc <- populated(prefetchPages(threadCount(dir)) * pageSize) }()
	mods, set := loadModules(maps, cache, open, image)
	buf := <-bufc
	defer unix.Munmap(buf) // the page cache holding it lives in this call
	snap.Modules = mods

	// The interpreter, if any, is found before anything stops too.
	var py *cpython.Sampling
	if opts != nil && opts.Python {
		if py = cpython.NewSampling(); !py.AttachMaps(uint32(pid)) {
			py = nil
		}
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st := &stopper{pid: pid, dir: dir}
	defer st.release()
	start := time.Now()
	if err := st.stopAll(); err != nil {
		return nil, err
	}
	snap.Time = unix.Monotonic()
	gregs := make([]uint64, 64)
	for _, tr := range st.tracees {
		if tr.state != stateStopped {
			continue
		}
		t := Thread{Tid: tr.tid}
		n, err := unix.PtraceGetRegSet(tr.tid, gregs)
		if err == nil {
			t.Regs, err = regsFromGregs(hostArch, gregs[:n])
		}
		if err != nil {
			t.Err = fmt.Errorf("snapshot: registers of tid %d: %w", tr.tid, err)
		}
		snap.Threads = append(snap.Threads, t)
	}
	lm := newLiveMem(pid, maps)
	defer lm.close()
	mem := newPageCache(readAhead, lm.fill)
	// One process_vm_readv fetches the top of every stack.
	sps := make([]uint64, 0, len(snap.Threads))
	for _, t := range snap.Threads {
		if t.Err == nil {
			sps = append(sps, t.Regs.SP())
		}
	}
	prefetch(lm, mem, sps, buf)
	// Names do not need the threads stopped: another goroutine reads them
	// (a /proc file per thread) while this one unwinds.
	names := make([]string, len(snap.Threads))
	namesDone := make(chan struct{})
	go func() {
		defer close(namesDone)
		for i := range names {
			names[i] = readComm(dir + "/task/" + strconv.Itoa(snap.Threads[i].Tid))
		}
	}()
	err = unwindThreads(snap.Threads, set, mem, opts.maxFrames())
	if py != nil {
		for i := range snap.Threads {
			t := &snap.Threads[i]
			frames, fresh := py.Frames(uint32(pid), uint32(t.Tid), snap.Time)
			t.Python = append([]format.PyFrame(nil), frames...)
			for _, c := range fresh {
				c.Lines = append([]byte(nil), c.Lines...)
				snap.PyCodes = append(snap.PyCodes, c)
			}
		}
	}
	st.release()
	snap.Stopped = time.Since(start)
	<-namesDone
	if err != nil {
		return nil, fmt.Errorf("snapshot: pid %d: %w", pid, err)
	}
	for i := range snap.Threads {
		snap.Threads[i].Name = names[i]
	}
	return snap, nil
}

// readComm returns the comm of /proc/PID[/task/TID], "" if unreadable.
func readComm(dir string) string {
	var b [64]byte // comm is at most 16 bytes
	n, err := unix.ReadSmall(dir+"/comm", b[:])
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b[:n]), "\n")
}

// tracerPid returns the TracerPid of /proc/PID[/task/TID], 0 if none or
// unknown.
func tracerPid(dir string) int {
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// liveMem reads a live process's memory: with process_vm_readv, or, where
// that call is missing or refused (old kernels, some sandboxes), with
// pread on /proc/PID/mem, which a tracer may read.
type liveMem struct {
	pid     int
	maps    []mapping
	procMem bool // use /proc/PID/mem
	f       *os.File
	iov     []unix.RemoteIovec
}

// forceProcMem makes tests take the /proc/PID/mem path.
var forceProcMem = false

func newLiveMem(pid int, maps []mapping) *liveMem {
	return &liveMem{pid: pid, maps: maps, procMem: forceProcMem}
}

func (m *liveMem) close() {
	if m.f != nil {
		m.f.Close()
	}
}

// fill reads pages at addr into buf (as pageCache wants), one remote
// iovec per page so a read that reaches an unmapped page still returns
// the pages before it, and never past the end of the mapping holding
// addr.
func (m *liveMem) fill(addr uint64, buf []byte) int {
	limit := addr + pageSize
	for i := range m.maps {
		if m.maps[i].Start <= addr && addr < m.maps[i].End {
			limit = m.maps[i].End
			break
		}
	}
	m.iov = m.iov[:0]
	for a := addr; a < limit && len(m.iov)*pageSize < len(buf); a += pageSize {
		m.iov = append(m.iov, unix.RemoteIovec{Base: uintptr(a), Len: pageSize})
	}
	return m.read(buf[:len(m.iov)*pageSize], m.iov)
}

// read reads the pages of iov into buf and returns the bytes read before
// the first page that failed.
func (m *liveMem) read(buf []byte, iov []unix.RemoteIovec) int {
	if !m.procMem {
		n, err := unix.ProcessVMRead(m.pid, buf, iov)
		if err == nil {
			return n
		}
		if err != unix.ENOSYS && err != unix.EPERM {
			return 0
		}
		m.procMem = true
	}
	if m.f == nil {
		f, err := os.Open("/proc/" + strconv.Itoa(m.pid) + "/mem")
		if err != nil {
			return 0
		}
		m.f = f
	}
	n := 0
	for _, v := range iov {
		if v.Base > 1<<63-1 {
			break
		}
		k, _ := m.f.ReadAt(buf[n:n+int(v.Len)], int64(v.Base))
		n += k
		if k < int(v.Len) {
			break
		}
	}
	return n
}

// prefetchAbove is how many bytes above each stack pointer prefetch
// reads: the innermost frames of a blocked thread (a system call wrapper,
// a wait or lock function) take a few hundred bytes; deeper pages are
// read on demand, readAhead at a time. A second page per stack that the
// unwind never touches costs more than the few threads whose stacks do
// cross it cost in reads (100 threads: 0.85 ms for two pages each, 0.45
// for one).
const prefetchAbove = 1 << 10

// prefetchPages is how many pages prefetch may read for n threads: the
// pages holding [sp, sp+prefetchAbove) of each.
func prefetchPages(n int) int { return n * (1 + (prefetchAbove+pageSize-2)/pageSize) }

// threadCount returns the number of threads of /proc/PID (num_threads of
// its stat), 0 if unknown.
func threadCount(dir string) int {
	var b [1024]byte
	n, err := unix.ReadSmall(dir+"/stat", b[:])
	if err != nil {
		return 0
	}
	s := string(b[:n])
	// After "pid (comm) ", num_threads is the 18th field.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 18 {
		return 0
	}
	c, _ := strconv.Atoi(f[17])
	return min(c, 1<<16)
}

// populated returns size bytes of memory whose pages are already
// faulted in: mapped with MAP_POPULATE, which here took 0.6-5 ms for 100
// threads' pages where touching fresh heap pages one by one took 3.4-19 ms
// (8 interleaved runs, load ~5). nil if the mapping fails (prefetch then
// allocates).
func populated(size int) []byte {
	if size <= 0 {
		return nil
	}
	b, err := unix.MmapPopulated(size)
	if err != nil {
		return nil
	}
	return b
}

// prefetch reads the pages holding [a, a+prefetchAbove) for each a of
// addrs into mem with as few reads as the kernel's iovec limit allows,
// into buf where it is large enough.
func prefetch(lm *liveMem, mem *pageCache, addrs []uint64, buf []byte) {
	const maxIov = 1024 // IOV_MAX
	var iov []unix.RemoteIovec
	seen := map[uint64]bool{}
	for _, a := range addrs {
		pg := a &^ (pageSize - 1)
		var end uint64
		for i := range lm.maps {
			if lm.maps[i].Start <= pg && pg < lm.maps[i].End {
				end = lm.maps[i].End
				break
			}
		}
		last := (a + prefetchAbove - 1) &^ (pageSize - 1)
		if last < pg { // wrapped
			last = pg
		}
		for ; pg <= last && pg < end; pg += pageSize {
			if !seen[pg] {
				seen[pg] = true
				iov = append(iov, unix.RemoteIovec{Base: uintptr(pg), Len: pageSize})
			}
		}
	}
	if len(buf) < len(iov)*pageSize {
		buf = make([]byte, len(iov)*pageSize)
	}
	for len(iov) > 0 {
		n := min(len(iov), maxIov)
		pages := lm.read(buf[:n*pageSize], iov[:n]) / pageSize
		for i := 0; i < pages; i++ {
			mem.pages[uint64(iov[i].Base)] = buf[i*pageSize : (i+1)*pageSize : (i+1)*pageSize]
		}
		if pages < n {
			pages++ // skip the page that failed; the cache reads it alone if needed
		}
		iov, buf = iov[pages:], buf[pages*pageSize:]
	}
}

type traceeState uint8

const (
	stateRunning traceeState = iota // seized, not yet seen stopped
	stateStopped
	stateGone // exited or detached
)

type tracee struct {
	tid   int
	state traceeState
	sig   int // signal to give back at detach
}

// stopper seizes and stops the threads of a process and lets them go.
type stopper struct {
	pid     int
	dir     string
	tracees []*tracee
}

func (s *stopper) stopAll() error {
	seen := map[int]bool{}
	for round := 0; round < maxSeizeRounds; round++ {
		ents, err := os.ReadDir(s.dir + "/task")
		if err != nil {
			if round == 0 {
				return fmt.Errorf("snapshot: threads of pid %d: %w", s.pid, err)
			}
			break
		}
		added := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || seen[tid] {
				continue
			}
			seen[tid] = true
			if err := unix.PtraceSeize(tid); err != nil {
				if err == unix.ESRCH {
					continue // exited since the listing
				}
				if err == unix.EPERM && len(s.tracees) > 0 && tracerPid(s.dir+"/task/"+e.Name()) == 0 {
					// Other threads could be seized, so the credentials
					// are fine: the kernel refuses an exiting thread.
					continue
				}
				if tp, name := procinfo.Tracer(tid); err == unix.EPERM && tp != 0 && tp != os.Getpid() {
					return &platform.TracedError{Pid: s.pid, Tid: tid, Tracer: tp, TracerName: name}
				}
				if err == unix.EPERM {
					return &platform.PermissionError{
						Op:   fmt.Sprintf("snapshot: ptrace seize of pid %d tid %d", s.pid, tid),
						Need: "CAP_SYS_PTRACE, or the same user with kernel.yama.ptrace_scope=0, and no other tracer",
						Err:  err,
					}
				}
				return fmt.Errorf("snapshot: ptrace seize of tid %d: %w", tid, err)
			}
			tr := &tracee{tid: tid}
			s.tracees = append(s.tracees, tr)
			added++
			if err := unix.PtraceInterrupt(tid); err != nil {
				if err == unix.ESRCH {
					tr.state = stateGone
					continue
				}
				return fmt.Errorf("snapshot: ptrace interrupt of tid %d: %w", tid, err)
			}
		}
		if added == 0 {
			break
		}
	}
	for _, tr := range s.tracees {
		if tr.state == stateRunning {
			s.wait(tr)
		}
	}
	return nil
}

// wait waits for a seized, interrupted thread to stop.
func (s *stopper) wait(tr *tracee) {
	ts, err := unix.WaitTid(tr.tid)
	switch {
	case err != nil || ts.Exited:
		tr.state = stateGone
	case ts.Event == 0:
		// A signal-delivery-stop came first: the signal is given back at
		// detach so the target does not lose it.
		tr.state, tr.sig = stateStopped, ts.Sig
	default:
		tr.state = stateStopped
	}
}

// release detaches from every thread, stopping first any seized thread
// not yet seen stopped (PTRACE_DETACH needs a stopped tracee).
func (s *stopper) release() {
	for _, tr := range s.tracees {
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
}

// checkTarget rejects what no ptrace snapshot or dump of pid can work on:
// an architecture without a register mapping, a bad pid, the calling
// process itself.
func checkTarget(feature string, pid int) error {
	if hostArch == arch.ArchUnknown {
		return &platform.NotSupportedError{Feature: feature, Reason: "unsupported architecture " + runtime.GOARCH}
	}
	if pid <= 0 {
		return fmt.Errorf("snapshot: bad pid %d", pid)
	}
	if pid == os.Getpid() {
		return fmt.Errorf("snapshot: pid %d is the calling process: a process cannot ptrace its own threads", pid)
	}
	return nil
}
