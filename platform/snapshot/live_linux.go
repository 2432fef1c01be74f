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
	"github.com/rawstack/rawstack/platform/linux/hotspot"
	v8 "github.com/rawstack/rawstack/platform/linux/v8"
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
	// The thread list (read once: the stop checks the kernel's thread
	// count for threads started since), the buffer the stacks will be
	// read into, allocated and faulted in, and the process's name and
	// command line are read on another goroutine while this one reads
	// and parses the maps and loads the modules. None of it needs the
	// target stopped.
	type ahead struct {
		tids          []int
		err           error
		buf           []byte
		name, cmdline string
		contended     bool
	}
	prec := make(chan ahead, 1)
	go func() {
		var p ahead
		p.tids, p.err = listThreads(dir)
		p.buf = populated(prefetchPages(len(p.tids)) * pageSize)
		p.name = readComm(dir)
		p.contended = cpuContended()
		if b, err := os.ReadFile(dir + "/cmdline"); err == nil {
			p.cmdline = strings.TrimRight(string(b), "\x00")
		}
		prec <- p
	}()
	var p ahead
	received := false
	defer func() {
		if !received {
			p = <-prec
		}
		if p.buf != nil {
			unix.Munmap(p.buf) // the page cache holding it lives in this call
		}
	}()
	mapsText, err := os.ReadFile(dir + "/maps")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("snapshot: no process %d", pid)
		}
		return nil, fmt.Errorf("snapshot: pid %d: %w", pid, err)
	}
	// A kernel thread has no memory map; a process has at least its
	// executable's mappings.
	if len(mapsText) == 0 && procinfo.KernelThread(pid) {
		return nil, fmt.Errorf("snapshot: pid %d (%s): %w", pid, procinfo.Comm(pid), platform.ErrKernelThread)
	}
	maps, err := parseMaps(mapsText)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %s/maps: %w", dir, err)
	}
	snap := &Snapshot{Pid: pid, Arch: hostArch}

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
	// CPUs) before any thread stops, and so does the stack buffer above.
	// Overlapping them with the stop does not pay: the target's threads
	// must run to enter their stop, and on a machine with few cores this
	// work takes the CPUs they need (100 threads stayed stopped a median
	// 16 ms with it overlapped, 9 ms with it done first; end to end the
	// same: 15 and 21 interleaved runs, 2 cores, load ~5).
	//
	// Whether the target runs a Python interpreter is found meanwhile on
	// another goroutine.
	pyc := make(chan *cpython.Sampling, 1)
	if opts != nil && opts.Python && mayRunPython(maps) {
		go func() {
			py := cpython.NewSampling()
			if !py.AttachMaps(uint32(pid)) {
				py = nil
			}
			pyc <- py
		}()
	} else {
		pyc <- nil
	}
	jsc := make(chan *v8.Sampling, 1)
	if opts != nil && opts.JIT && mayRunV8(maps) {
		go func() {
			js := v8.NewSampling()
			js.AttachMaps(uint32(pid))
			jsc <- js
		}()
	} else {
		jsc <- nil
	}
	hsc := make(chan *hotspot.Sampling, 1)
	if opts != nil && opts.JIT && mayRunHotSpot(maps) {
		go func() {
			hs := hotspot.NewSampling()
			hs.AttachMaps(uint32(pid))
			hsc <- hs
		}()
	} else {
		hsc <- nil
	}
	mods, set := loadModules(maps, cache, open, image)
	p, received = <-prec, true
	py := <-pyc
	js := <-jsc
	hs := <-hsc
	buf := p.buf
	snap.Name, snap.Cmdline = p.name, p.cmdline
	snap.Modules = mods
	if p.err != nil {
		return nil, fmt.Errorf("snapshot: threads of pid %d: %w", pid, p.err)
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st := &stopper{pid: pid, dir: dir, tids: p.tids, contended: p.contended}
	defer st.release()
	start := time.Now()
	if err := st.stopAll(); err != nil {
		return nil, err
	}
	snap.Time = unix.Monotonic()
	for _, tr := range st.tracees {
		if tr.state != stateStopped {
			continue
		}
		t := Thread{Tid: tr.tid}
		err := tr.regsErr
		if err == nil {
			t.Regs, err = regsFromGregs(hostArch, tr.gregs)
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
	err = unwindThreads(snap.Threads, set, mem, opts.maxFrames())
	if py != nil {
		for i := range snap.Threads {
			t := &snap.Threads[i]
			frames, fresh := py.Frames(uint32(pid), uint32(t.Tid), snap.Time)
			t.Python = append([]format.PyFrame(nil), frames...)
			if t.GIL = py.GIL(); t.GIL == format.PyGILNone && py.WaitingGIL(uint32(pid), t.PCs) {
				t.GIL = format.PyGILWaiting
			}
			for _, c := range fresh {
				c.Lines = append([]byte(nil), c.Lines...)
				snap.PyCodes = append(snap.PyCodes, c)
			}
		}
	}
	var jf jsFrames
	if js != nil {
		jf = js
	}
	var hf javaFrames
	if hs != nil {
		hf = hs
	}
	nameJIT(snap, jf, hf)
	if js != nil {
		snap.JITErrors = append(snap.JITErrors, js.Errors()...)
	}
	if hs != nil {
		snap.JITErrors = append(snap.JITErrors, hs.Errors()...)
	}
	// Names do not need the threads stopped: another goroutine reads
	// them (a /proc file per thread) while this one detaches, not while
	// the unwind needs the CPUs.
	namesDone := make(chan struct{})
	if opts == nil || !opts.NoThreadNames {
		go func() {
			defer close(namesDone)
			for i := range snap.Threads {
				snap.Threads[i].Name = readComm(dir + "/task/" + strconv.Itoa(snap.Threads[i].Tid))
			}
		}()
	} else {
		close(namesDone)
	}
	hookDone := make(chan struct{})
	if opts != nil && opts.WhileReleasing != nil && err == nil {
		go func() {
			defer close(hookDone)
			opts.WhileReleasing(snap)
		}()
	} else {
		close(hookDone)
	}
	st.release()
	snap.Stopped = time.Since(start)
	<-namesDone
	<-hookDone
	if err != nil {
		return nil, fmt.Errorf("snapshot: pid %d: %w", pid, err)
	}
	return snap, nil
}

// mayRunHotSpot says some executable mapping is HotSpot's libjvm.
func mayRunHotSpot(maps []mapping) bool {
	for i := range maps {
		if maps[i].Exec() && hotspot.IsLibJVM(maps[i].Path) {
			return true
		}
	}
	return false
}

// mayRunV8 says some executable mapping is a file V8's reader attaches
// to (a node executable or a libnode).
func mayRunV8(maps []mapping) bool {
	for i := range maps {
		if maps[i].Exec() && maps[i].Path != "" && v8.MaybeV8(maps[i].Path) {
			return true
		}
	}
	return false
}

// mayRunPython says some executable mapping is a python executable or a
// libpython, the only files the interpreter reader attaches to: the rest
// need not pay for reading the maps again.
func mayRunPython(maps []mapping) bool {
	for i := range maps {
		if maps[i].Exec() && maps[i].Path != "" && cpython.MaybePython(maps[i].Path) {
			return true
		}
	}
	return false
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

// prefetchPages is how many pages of buffer to fault in for prefetch of
// n threads: the page holding sp, and the next for the quarter of stacks
// (prefetchAbove/pageSize) whose sp lies so close to its page's end that
// [sp, sp+prefetchAbove) crosses into it, with room for chance. Pages
// past the buffer are read into the heap.
func prefetchPages(n int) int { return n + n*prefetchAbove/pageSize*3/2 + 4 }

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
	for len(iov) > 0 {
		n := min(len(iov), maxIov, len(buf)/pageSize)
		if n == 0 { // buf is used up: the rest go to the heap
			buf = make([]byte, min(len(iov), maxIov)*pageSize)
			continue
		}
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
