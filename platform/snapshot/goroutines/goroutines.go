// Package goroutines lists every goroutine of a Go program, live or from a
// core dump: id, status, wait reason and how long it has waited, the
// thread a running goroutine runs on, its pprof labels, its stack with
// file:line and inlined frames, and the go statement that created it.
//
//	d, err := goroutines.Process(pid, nil)
//	if err != nil { ... }
//	for _, g := range d.Goroutines {
//		fmt.Println(g.ID, g.State(), g.Frames[0].Func)
//	}
//	for _, grp := range goroutines.GroupAll(d.Goroutines) { ... }
//
// # How it reads them
//
// [Process] stops the target's threads (ptrace seize and interrupt,
// see [snapshot.Frozen]) only while it copies, with batched
// process_vm_readv, what a goroutine listing needs: runtime.allgs, the
// g's, the m's running them and the used part of each stack (the reads
// planned, and the memory they fill faulted in, by a pass over the
// running process just before); the target is never left in a tracing
// stop. It then reads the runtime's structures from that copy itself: runtime.allgs,
// and for each g its id, status, wait reason and wait time, sched
// (pc, sp, bp, lr), gopc, startpc, m (the thread it runs on) and pprof
// labels, at the offsets the executable's DWARF gives (found by
// platform/linux's goroutine reader, the one sampling uses for
// goroutine ids and labels); each stack is unwound with the Go pclntab's
// pcsp tables, as the runtime's own traceback does, and named from the
// pclntab (package internal/gopclntab), inlined calls as frames of
// their own. The cost is that of the g's and their stacks: nothing of
// the binary's debug info is loaded but a few struct layouts.
//
// Delve (github.com/go-delve/delve) stays where it serves:
//
//   - [Core] reads core files (gdb's gcore, the kernel's) with delve's
//     core reader (pkg/proc/core), which knows every core layout and the
//     runtime's structures of every Go version it supports (v1.27.2: Go
//     1.25 to 1.27);
//   - the tests hold the direct reader to delve: one copy of the live
//     fixture is read both ways, and every goroutine must come out the
//     same (status, wait, thread, labels, creator, start function, every
//     frame with its pc, file, line and inlining);
//   - the wait reasons are named with delve's table
//     (service/api.WaitReasonString), which follows the Go versions.
//
// # What it needs
//
// The runtime's types (struct layouts, for delve all of them) come from the
// executable's DWARF. A Go binary built with -ldflags=-w or stripped has
// none: [Core] and [Process] then fail with an error wrapping [ErrNoDWARF]
// before anything is stopped, and `rawstack snapshot` without
// --goroutines still shows every thread's stack (named later from the Go
// pclntab by `rawstack report`). A binary that is not Go fails with
// [ErrNotGo].
package goroutines

import (
	"cmp"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-delve/delve/pkg/goversion"
	"github.com/go-delve/delve/pkg/proc"
	"github.com/go-delve/delve/pkg/proc/core"
	"github.com/go-delve/delve/service/api"
)

// Errors about the binary, before anything is read.
var (
	// ErrNotGo says the executable is not a Go program.
	ErrNotGo = errors.New("not a Go program")
	// ErrNoDWARF says the Go executable has no DWARF debug info.
	ErrNoDWARF = errors.New("Go program without DWARF debug info")
)

// BinaryError says why an executable cannot be read for goroutines.
type BinaryError struct {
	Path      string
	Pid       int    // 0 for a core file
	GoVersion string // "" if not Go
	Err       error  // ErrNotGo, ErrNoDWARF, or why the file could not be read
}

func (e *BinaryError) Error() string {
	who := e.Path
	if e.Pid != 0 {
		who = fmt.Sprintf("pid %d (%s)", e.Pid, e.Path)
	}
	switch e.Err {
	case ErrNotGo:
		return who + ": " + ErrNotGo.Error() + ": goroutines exist only in Go programs; `rawstack snapshot` without --goroutines shows its threads"
	case ErrNoDWARF:
		return fmt.Sprintf("%s: %s (built by %s with -ldflags=-w, or stripped): goroutines cannot be read without the runtime's types; "+
			"`rawstack snapshot` without --goroutines still shows every thread's stack, and `rawstack report` names its frames from the Go pclntab", who, ErrNoDWARF, e.GoVersion)
	}
	return who + ": " + e.Err.Error()
}

func (e *BinaryError) Unwrap() error { return e.Err }

// CheckBinary returns nil if the ELF executable at path is a Go program
// with DWARF, else a *BinaryError.
func CheckBinary(path string) error {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		if _, serr := os.Stat(path); serr != nil {
			return &BinaryError{Path: path, Err: serr}
		}
		return &BinaryError{Path: path, Err: ErrNotGo}
	}
	f, err := elf.Open(path)
	if err != nil {
		return &BinaryError{Path: path, GoVersion: bi.GoVersion, Err: err}
	}
	defer f.Close()
	if f.Section(".debug_info") == nil && f.Section(".zdebug_info") == nil {
		return &BinaryError{Path: path, GoVersion: bi.GoVersion, Err: ErrNoDWARF}
	}
	return nil
}

// Options tune Core and Process. nil is fine.
type Options struct {
	// MaxFrames caps the frames of one stack; 0 means 100.
	MaxFrames int
	// DebugInfoDirs are searched for separate debug files (by build id).
	DebugInfoDirs []string
}

func (o *Options) maxFrames() int {
	if o == nil || o.MaxFrames <= 0 {
		return 100
	}
	return o.MaxFrames
}

// Dump is every goroutine of one process at one moment.
type Dump struct {
	Pid       int // 0 if a core does not say
	Exe       string
	GoVersion string // "go1.26.8"
	// Time is CLOCK_MONOTONIC in ns when a live process was stopped (the
	// Go runtime's nanotime clock on Linux), 0 for a core file.
	Time int64
	// Stopped is how long a live process's threads were stopped; Copied
	// how many bytes of its memory were copied meanwhile.
	Stopped time.Duration
	Copied  int64
	// Goroutines are sorted by ID.
	Goroutines []Goroutine
}

// Goroutine is one goroutine.
type Goroutine struct {
	ID int64
	// Status is the runtime's status: "idle", "runnable", "running",
	// "syscall", "waiting", "copystack", "preempted".
	Status string
	// WaitReason says why a waiting goroutine waits ("chan receive",
	// "select", "sync.Mutex.Lock", ...), "" when it does not.
	WaitReason string
	// WaitSince is the runtime's g.waitsince: the nanotime of the first
	// garbage collection after the goroutine blocked (the runtime records
	// no better time), 0 if none has run since. [Dump.Waited] turns it
	// into a duration.
	WaitSince int64
	// Thread is the OS thread running the goroutine, 0 if none.
	Thread int
	// Labels are the goroutine's pprof labels (runtime/pprof.Do).
	Labels map[string]string
	// Frames is the stack, innermost first; an inlined call is a frame of
	// its own with Inlined set.
	Frames []Frame
	// CreatedBy is the go statement that started the goroutine (Func is
	// empty for the main goroutine).
	CreatedBy Frame
	// StartFunc is the function the goroutine started in.
	StartFunc string
	// System says the runtime started the goroutine for itself.
	System bool
	// Err says why the goroutine or its stack could not be read whole.
	Err error
}

// Frame is one frame of a goroutine's stack.
type Frame struct {
	PC      uint64
	Func    string
	File    string
	Line    int
	Inlined bool // an inlined call: no frame of its own on the real stack
}

// State is Status, or the wait reason for a waiting goroutine.
func (g *Goroutine) State() string {
	if g.WaitReason != "" && (g.Status == "waiting" || g.Status == "syscall") {
		return g.WaitReason
	}
	return g.Status
}

// Waited returns how long g had waited when d was taken (a lower bound,
// see WaitSince), or 0 if unknown.
func (d *Dump) Waited(g *Goroutine) time.Duration {
	if d.Time == 0 || g.WaitSince <= 0 || g.WaitSince > d.Time {
		return 0
	}
	return time.Duration(d.Time - g.WaitSince)
}

var statusNames = [...]string{"idle", "runnable", "running", "syscall", "waiting", "moribund", "dead", "enqueue", "copystack", "preempted", "leaked", "deadextra"}

func statusName(s uint64) string {
	s &^= 0x1000 // _Gscan
	if s < uint64(len(statusNames)) {
		return statusNames[s]
	}
	return fmt.Sprintf("status %d", s)
}

// Core lists the goroutines of a core dump of the Go executable exe
// (gdb's gcore, the kernel's core dumps, [snapshot.Image.WriteCore]).
func Core(corePath, exe string, opts *Options) (*Dump, error) {
	if err := CheckBinary(exe); err != nil {
		return nil, err
	}
	if _, err := os.Stat(corePath); err != nil {
		return nil, fmt.Errorf("goroutines: %w", err)
	}
	return read(corePath, exe, opts)
}

// read opens a core with delve and reads every goroutine.
func read(corePath, exe string, opts *Options) (*Dump, error) {
	var dirs []string
	if opts != nil {
		dirs = opts.DebugInfoDirs
	}
	grp, err := core.OpenCore(corePath, exe, dirs)
	if err != nil {
		return nil, fmt.Errorf("goroutines: core %s of %s: %w", corePath, exe, err)
	}
	defer grp.Detach(false)
	t := grp.Selected
	bi := t.BinInfo()
	d := &Dump{Pid: t.Pid(), Exe: exe}
	ver := goversion.ParseProducer(bi.Producer())
	d.GoVersion = fmt.Sprintf("go%d.%d", ver.Major, ver.Minor)
	if bv, err := buildinfo.ReadFile(exe); err == nil {
		d.GoVersion = bv.GoVersion
	}
	gs, _, err := proc.GoroutinesInfo(t, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("goroutines: %s: reading the runtime's goroutine list: %w", corePath, err)
	}
	depth := opts.maxFrames()
	d.Goroutines = make([]Goroutine, 0, len(gs))
	for _, g := range gs {
		if g.Unreadable != nil {
			d.Goroutines = append(d.Goroutines, Goroutine{Err: g.Unreadable})
			continue
		}
		out := Goroutine{
			ID:        g.ID,
			Status:    statusName(g.Status),
			WaitSince: g.WaitSince,
			Labels:    g.Labels(),
			System:    g.System(t),
		}
		if s := g.Status &^ 0x1000; s == proc.Gwaiting || s == proc.Gsyscall && g.WaitReason != 0 {
			out.WaitReason = api.WaitReasonString(&ver, g.WaitReason)
		}
		if g.Thread != nil {
			out.Thread = g.Thread.ThreadID()
		}
		if g.GoPC != 0 {
			loc := g.Go()
			out.CreatedBy = frameOf(loc)
		}
		if sl := g.StartLoc(t); sl.Fn != nil {
			out.StartFunc = sl.Fn.Name
		}
		frames, err := proc.GoroutineStacktrace(t, g, depth, 0)
		if err != nil {
			out.Err = err
		}
		for _, fr := range frames {
			if fr.Err != nil {
				out.Err = fr.Err
				break
			}
			f := frameOf(fr.Call)
			f.Inlined = fr.Inlined
			out.Frames = append(out.Frames, f)
		}
		d.Goroutines = append(d.Goroutines, out)
	}
	slices.SortStableFunc(d.Goroutines, func(a, b Goroutine) int { return cmp.Compare(a.ID, b.ID) })
	return d, nil
}

func frameOf(l proc.Location) Frame {
	f := Frame{PC: l.PC, File: l.File, Line: l.Line}
	if l.Fn != nil {
		f.Func = l.Fn.Name
	}
	return f
}

// Group is goroutines with the same state and the same stack (function,
// file and line of every frame), as goroutine profiles group them.
type Group struct {
	State  string
	Frames []Frame
	IDs    []int64
	// Labels is set when every goroutine of the group has the same labels.
	Labels map[string]string
	// Thread is the thread of a group of one running goroutine.
	Thread int
}

// GroupAll groups gs by state and stack, largest group first (ties by the
// smallest id).
func GroupAll(gs []Goroutine) []Group {
	idx := map[string]int{}
	var out []Group
	var key strings.Builder
	for i := range gs {
		g := &gs[i]
		key.Reset()
		key.WriteString(g.State())
		for _, f := range g.Frames {
			fmt.Fprintf(&key, "\x00%s\x00%s:%d", f.Func, f.File, f.Line)
		}
		k := key.String()
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, Group{State: g.State(), Frames: g.Frames, Labels: g.Labels, Thread: g.Thread})
		} else if !sameLabels(out[j].Labels, g.Labels) {
			out[j].Labels = nil
		}
		out[j].IDs = append(out[j].IDs, g.ID)
		if len(out[j].IDs) > 1 {
			out[j].Thread = 0
		}
	}
	slices.SortStableFunc(out, func(a, b Group) int {
		if c := cmp.Compare(len(b.IDs), len(a.IDs)); c != 0 {
			return c
		}
		return cmp.Compare(a.IDs[0], b.IDs[0])
	})
	return out
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
