package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform/snapshot"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/elfsrc"
	"github.com/rawstack/rawstack/symbolizer/sources"
)

var snapshotCmd = command{
	name:  "snapshot",
	usage: "(-p PID | --core FILE [--exe BINARY] [--root DIR] | --minidump FILE [--root DIR]) [--write-minidump FILE] [-o FILE] [--no-symbols | --dwarf] [--no-cache] [--no-python] [--no-jit] [--stats] | (-p PID | --core FILE --exe BINARY) --goroutines [--group]",
	short: "print the stacks of all threads (or, with --goroutines, all goroutines) of a live process, a core dump or a Windows minidump",
	run:   runSnapshot,
}

func runSnapshot(args []string, stdout, stderr io.Writer) error {
	if wantsGoroutines(args) {
		return runGoroutines(args, stdout, stderr)
	}
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pid := fs.Int("p", 0, "the live process to snapshot")
	core := fs.String("core", "", "an ELF core dump to read instead of a live process")
	exe := fs.String("exe", "", "with --core: the main executable, where the core's path does not exist here")
	root := fs.String("root", "", "with --core: a sysroot prepended to the paths the core names; with --minidump: where C:\\... is DIR/c:/... (a Wine prefix's dosdevices)")
	out := fs.String("o", "", "write an event stream to FILE instead of printing")
	noSyms := fs.Bool("no-symbols", false, "print module+offset instead of function names")
	dwarf := fs.Bool("dwarf", false, "name functions from DWARF too, with the innermost inlined function and its file:line (slower: indexes debug info)")
	stats := fs.Bool("stats", false, "print timings to stderr")
	noCache := fs.Bool("no-cache", false, "do not keep or use the symbol indexes cached by build id in $XDG_CACHE_HOME/rawstack/symtab (else ~/.cache)")
	maxFrames := fs.Int("max-frames", 0, "cap on frames per thread (0: 512)")
	minidump := fs.String("minidump", "", "a Windows minidump to read instead of a live process")
	noPython := fs.Bool("no-python", false, "do not read CPython threads' Python frames (by default printed at their _PyEval_EvalFrameDefault frames)")
	noJIT := fs.Bool("no-jit", false, "do not name Node.js threads' JavaScript frames from V8's metadata, nor a JVM's Java frames from HotSpot's tables (by default printed in place of the native frames they name)")
	writeDump := fs.String("write-minidump", "", "also write the threads, their stacks and the modules as a minidump (Windows processes, minidumps)")
	if err := fs.Parse(args); err != nil {
		return &usageError{err.Error()}
	}
	if n := btoi(*pid != 0) + btoi(*core != "") + btoi(*minidump != ""); n != 1 {
		return &usageError{"give exactly one of -p PID, --core FILE and --minidump FILE"}
	}
	if *writeDump != "" && *core != "" {
		return &usageError{"--write-minidump writes Windows processes and minidumps, not ELF cores"}
	}
	if fs.NArg() > 0 {
		return &usageError{"unexpected argument " + strconv.Quote(fs.Arg(0))}
	}
	// A snapshot is short-lived and its heap small (stack pages, the
	// unwind and symbol tables of a few modules), yet it outgrows the
	// collector's first 4 MB goal: a collection then costs more than the
	// memory it would save.
	debug.SetGCPercent(400)
	opts := &snapshot.Options{MaxFrames: *maxFrames, Exe: *exe, Root: *root, Python: !*noPython, JIT: !*noJIT}
	// The listing prints no thread names (eu-stack's neither); an event
	// stream and a minidump carry them.
	opts.NoThreadNames = *out == "" && *writeDump == ""
	// The listing's frame names are looked up while the threads are
	// being detached.
	mode := symtabNames
	if *noSyms {
		mode = noNames
	} else if *dwarf {
		mode = dwarfNames
	}
	cache := ""
	if !*noCache {
		cache = symtabCacheDir()
	}
	var names *frameNamer
	if *out == "" && mode != noNames {
		opts.WhileReleasing = func(s *snapshot.Snapshot) { names = newFrameNamer(s, mode == dwarfNames, cache) }
	}
	t0 := time.Now()
	var snap *snapshot.Snapshot
	var err error
	switch {
	case *core != "":
		snap, err = snapshot.Core(*core, opts)
	case *minidump != "" || *writeDump != "":
		snap, err = snapshotDump(*pid, *minidump, *writeDump, opts)
	default:
		restore := quietStopSignals()
		snap, err = snapshot.Process(*pid, opts)
		restore()
	}
	if err != nil {
		return err
	}
	for _, e := range snap.JITErrors {
		fmt.Fprintf(stderr, "rawstack snapshot: %v (its frames stay native)\n", e)
	}
	t1 := time.Now()
	if *out != "" {
		err = writeSnapshot(snap, *out)
	} else {
		bw := bufio.NewWriterSize(stdout, 64<<10)
		err = printSnapshot(bw, snap, mode, cache, names)
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
	}
	if *stats {
		fmt.Fprintf(stderr, "snapshot: %d threads, %d modules; capture %v (threads stopped %v), output %v\n",
			len(snap.Threads), len(snap.Modules), t1.Sub(t0).Round(time.Microsecond), snap.Stopped.Round(time.Microsecond), time.Since(t1).Round(time.Microsecond))
	}
	return err
}

func writeSnapshot(snap *snapshot.Snapshot, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w, err := format.NewWriter(f, snap.Header(), nil)
	if err != nil {
		f.Close()
		return err
	}
	err = snap.Write(w)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

type nameMode int

const (
	symtabNames nameMode = iota // ELF symbol tables, as eu-stack names frames
	noNames
	dwarfNames // symbolizer/sources: DWARF, inlined functions, file:line
)

// printSnapshot prints snap as eu-stack does: "TID n:" and one
// "#i  0xPC function" line per frame. Without a function name a frame
// shows module+offset (the module-relative address of format/SPEC.md).
//
// cache, if not "", is the directory of symbol indexes by build id
// (symtabCacheDir). names, if not nil, is the namer already made for
// snap (see snapshot.Options.WhileReleasing).
func printSnapshot(w io.Writer, snap *snapshot.Snapshot, mode nameMode, cache string, names *frameNamer) error {
	if mode == noNames {
		names = nil
	} else if names == nil {
		names = newFrameNamer(snap, mode == dwarfNames, cache)
	}
	if names != nil {
		defer names.close()
	}
	// Lines are appended with strconv rather than fmt: a hundred threads
	// print thousands of frames, and fmt was a tenth of a snapshot's CPU.
	codes := map[uint64]*format.PyCode{}
	for i := range snap.PyCodes {
		codes[snap.PyCodes[i].ID] = &snap.PyCodes[i]
	}
	funcs := map[uint64]*format.JITFunc{}
	for i := range snap.JITFuncs {
		funcs[snap.JITFuncs[i].ID] = &snap.JITFuncs[i]
	}
	b := make([]byte, 0, 64<<10)
	b = fmt.Appendf(b, "PID %d - process\n", snap.Pid)
	for _, t := range snap.Threads {
		b = append(b, "TID "...)
		b = strconv.AppendInt(b, int64(t.Tid), 10)
		b = append(b, ":\n"...)
		if t.Err != nil {
			b = fmt.Appendf(b, "  (%v)\n", t.Err)
			continue
		}
		switch t.GIL { // as py-spy dump marks the GIL's holder
		case format.PyGILHeld:
			b = append(b, "    (holds the GIL)\n"...)
		case format.PyGILWaiting:
			b = append(b, "    (waiting for the GIL)\n"...)
		}
		py := pythonGroups(t.Python)
		jit := t.JIT
		for i, pc := range t.PCs {
			if len(py) > 0 && names != nil {
				if m := snap.Module(pc); m != nil {
					look := pc
					if i > 0 {
						look--
					}
					if fn, _ := names.name(m, look); fn == "_PyEval_EvalFrameDefault" {
						b = appendPython(b, py[0], codes)
						py = py[1:]
					}
				}
			}
			if len(jit) > 0 && jit[0].PC == pc {
				// V8's frames for this native frame: the inlined ones
				// first, then the frame itself.
				for len(jit) > 0 && jit[0].PC == pc && jit[0].Inlined {
					b = appendJIT(append(b, "    "...), jit[0], funcs)
					b = append(b, " (inlined)\n"...)
					jit = jit[1:]
				}
				if len(jit) > 0 && jit[0].PC == pc {
					b = appendJIT(append(appendFrameHead(b, i, pc), ' '), jit[0], funcs)
					b = append(b, '\n')
					jit = jit[1:]
					continue
				}
			}
			b = appendFrameHead(b, i, pc) // "#%-2d 0x%016x"
			m := snap.Module(pc)
			look := pc
			if i > 0 {
				look-- // a return address: name the call
			}
			name, where := "", ""
			if m != nil && names != nil {
				name, where = names.name(m, look)
			}
			switch {
			case name != "":
				b = append(b, ' ')
				b = append(b, name...)
			case m != nil && m.HaveBias:
				b = append(b, ' ')
				b = append(b, filepath.Base(m.Path)...)
				b = append(b, "+0x"...)
				b = strconv.AppendUint(b, pc-m.Bias, 16)
			case m != nil:
				b = append(b, ' ')
				b = append(b, filepath.Base(m.Path)...)
				b = append(b, "@0x"...)
				b = strconv.AppendUint(b, pc-m.Start, 16)
			}
			if where != "" {
				b = append(b, ' ')
				b = append(b, where...)
			}
			b = append(b, '\n')
		}
		for _, g := range py { // no evaluation frame left for them
			b = appendPython(b, g, codes)
		}
		if t.Stop != arch.StopOutermost {
			b = fmt.Appendf(b, "    (unwind stopped: %v)\n", t.Stop)
		}
		if len(b) >= 32<<10 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	_, err := w.Write(b)
	return err
}

// pythonGroups splits a thread's Python frames (leaf first) into the
// groups each evaluation frame ran: a group ends at an entry frame.
func pythonGroups(frames []format.PyFrame) [][]format.PyFrame {
	var groups [][]format.PyFrame
	start := 0
	for i, f := range frames {
		if f.Entry {
			groups = append(groups, frames[start:i+1])
			start = i + 1
		}
	}
	if start < len(frames) {
		groups = append(groups, frames[start:])
	}
	return groups
}

// appendPython appends one line per Python frame, as py-spy dump
// --native prints them: "    gamma_py (/srv/app.py:16)".
func appendPython(b []byte, frames []format.PyFrame, codes map[uint64]*format.PyCode) []byte {
	for _, f := range frames {
		c := codes[f.Code]
		if c == nil {
			b = fmt.Appendf(b, "    [python code %d]\n", f.Code)
			continue
		}
		line, _ := symbolizer.PyLine(c.Table, c.Lines, c.FirstLine, f.Offset)
		b = fmt.Appendf(b, "    %s (%s:%d)\n", c.Name, c.File, line)
	}
	return b
}

// appendJIT appends a JIT runtime's frame: "mix (/srv/shop.js:9)".
func appendJIT(b []byte, f format.JITFrame, funcs map[uint64]*format.JITFunc) []byte {
	fn := funcs[f.Func]
	if fn == nil {
		return fmt.Appendf(b, "[jit function %d]", f.Func)
	}
	return fmt.Appendf(b, "%s (%s:%d)", fn.Name, fn.File, f.Line)
}

// appendFrameHead appends what fmt's "#%-2d 0x%016x" prints for frame i at pc.
func appendFrameHead(b []byte, i int, pc uint64) []byte {
	b = append(b, '#')
	b = strconv.AppendInt(b, int64(i), 10)
	if i >= 0 && i < 10 {
		b = append(b, ' ')
	}
	b = append(b, " 0x"...)
	const hexDigits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[pc>>uint(shift)&0xf])
	}
	return b
}

// symtabCacheDir is where rawstack snapshot keeps the symbol indexes of
// the files it named frames from, by build id ([elfsrc.CachedSymIndex]):
// $XDG_CACHE_HOME/rawstack/symtab, else ~/.cache/rawstack/symtab; ""
// where there is no user cache directory.
//
// The cache is on by default (--no-cache turns it off): snapshots are
// taken again and again of the same programs, and a second snapshot
// then reads a small index per library (libc's debug file: 3,706
// entries, 147 KB) instead of looking for the debug file and walking its
// symbol table: 0.6 ms less CPU a run, 6.0 against 6.6 ms (4 × 20 runs
// alternating, load ~7); the first run pays ~1.4 ms more to build it. An
// index is keyed by build id, so it never goes stale; it is checked
// (sizes capped, order, bounds, its build id) before use and rebuilt
// over when it fails; writes go through a temporary file and a rename,
// and a cache that cannot be written costs only the next run the build
// again. debuginfod downloads already go to $XDG_CACHE_HOME/rawstack.
func symtabCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "rawstack", "symtab")
}

// frameNamer names frames by module. The files of every module a stack
// touches are opened up front, concurrently.
type frameNamer struct {
	srcs map[string]namer // by module file
}

type namer interface {
	name(addr uint64) (fn, where string)
	close()
}

func newFrameNamer(snap *snapshot.Snapshot, dwarf bool, cache string) *frameNamer {
	n := &frameNamer{srcs: map[string]namer{}}
	var files []*snapshot.Module
	// The link-time addresses printSnapshot will look up, by module file:
	// a symbol table is searched for these alone.
	want := map[string][]uint64{}
	for _, t := range snap.Threads {
		for i, pc := range t.PCs {
			if m := snap.Module(pc); m != nil && m.HaveBias && m.File != "" {
				if _, ok := n.srcs[m.File]; !ok {
					n.srcs[m.File] = nil
					files = append(files, m)
				}
				look := pc
				if i > 0 {
					look-- // as printSnapshot looks it up
				}
				want[m.File] = append(want[m.File], look-m.Bias)
			}
		}
	}
	out := make([]namer, len(files))
	var wg sync.WaitGroup
	for i, m := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if dwarf || m.Kind == format.ModulePE {
				// The one entry every command names frames through: a PE
				// image from its PDB, DWARF, Go tables or symbol tables
				// (per address), an ELF file from its DWARF.
				if src, err := sources.OpenFile(m.File, &symbolizer.Options{NoDebuginfod: true}, ""); err == nil {
					out[i] = &srcNamer{src: src, where: dwarf}
				}
				return
			}
			// An index cached from a separate debug file names the
			// module as that file does, without looking for it again.
			if cache != "" && len(m.BuildID) > 0 {
				if x, err := elfsrc.LoadSymIndex(cache, m.BuildID, "debug"); err == nil {
					out[i] = indexNames{x}
					return
				}
			}
			dbg := debugFileFor(m.File, m.BuildID)
			// A separate debug file holds the full .symtab of a stripped
			// library, with its local functions.
			for _, p := range []string{dbg, m.File} {
				if p == "" {
					continue
				}
				if cache != "" && len(m.BuildID) > 0 {
					kind := "file"
					if p == dbg {
						kind = "debug"
					}
					if x, err := elfsrc.CachedSymIndex(cache, p, m.BuildID, kind); err == nil && x != nil {
						out[i] = indexNames{x}
						return
					}
				}
				if st, err := elfsrc.SymtabNames(p, want[m.File]); err == nil && st != nil {
					out[i] = symNames(st)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, m := range files {
		n.srcs[m.File] = out[i]
	}
	return n
}

// debugFileFor returns the separate debug file of the module file path
// (build id id), found as every command finds one (elfsrc.LocateConfig:
// the build id under /usr/lib/debug, .gnu_debuglink); a snapshot does not
// wait for debuginfod. "" when there is none or path carries its own.
func debugFileFor(path string, id []byte) string {
	return elfsrc.DebugFile(path, id, &symbolizer.Options{NoDebuginfod: true})
}

func (n *frameNamer) name(m *snapshot.Module, pc uint64) (string, string) {
	src := n.srcs[m.File]
	if src == nil || !m.HaveBias {
		return "", ""
	}
	return src.name(pc - m.Bias)
}

func (n *frameNamer) close() {
	for _, s := range n.srcs {
		if s != nil {
			s.close()
		}
	}
}

// srcNamer names frames from a symbol source; with where, it adds the
// file:line of the innermost frame.
type srcNamer struct {
	src   symbolizer.Source
	where bool
	buf   []symbolizer.Frame
}

func (d *srcNamer) name(addr uint64) (string, string) {
	fr, err := d.src.Symbolize(addr, d.buf[:0])
	d.buf = fr
	if err != nil || len(fr) == 0 {
		return "", ""
	}
	// The outermost frame is the function the address is in; inlined
	// frames come first.
	where := ""
	if d.where && fr[0].File != "" && fr[0].Line > 0 {
		where = fmt.Sprintf("%s:%d", fr[0].File, fr[0].Line)
		if len(fr) > 1 {
			where = fr[0].Function + " inlined at " + where
		}
	}
	return fr[len(fr)-1].Function, where
}

func (d *srcNamer) close() { d.src.Close() }

// indexNames names frames from a symbol index.
type indexNames struct{ x *elfsrc.SymIndex }

func (n indexNames) name(addr uint64) (string, string) { return n.x.Name(addr), "" }

func (n indexNames) close() {}

// symNames is the names of the frames of one ELF file, by link-time
// address, from [elfsrc.SymtabNames]; it knows only the addresses it was
// built for.
type symNames map[uint64]string

func (n symNames) name(addr uint64) (string, string) { return n[addr], "" }

func (n symNames) close() {}
