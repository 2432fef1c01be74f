package main

import (
	"bufio"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform/snapshot"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/elfsrc"
)

func init() {
	register(&command{
		name:  "snapshot",
		usage: "(-p PID | --core FILE [--exe BINARY] [--root DIR]) [-o FILE] [--no-symbols] [--stats]",
		short: "print the stacks of all threads of a live process or a core dump, like eu-stack",
		run:   runSnapshot,
	})
}

func runSnapshot(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pid := fs.Int("p", 0, "the live process to snapshot")
	core := fs.String("core", "", "an ELF core dump to read instead of a live process")
	exe := fs.String("exe", "", "with --core: the main executable, where the core's path does not exist here")
	root := fs.String("root", "", "with --core: a sysroot prepended to the paths the core names")
	out := fs.String("o", "", "write an event stream to FILE instead of printing")
	noSyms := fs.Bool("no-symbols", false, "print module+offset instead of function names")
	stats := fs.Bool("stats", false, "print timings to stderr")
	maxFrames := fs.Int("max-frames", 0, "cap on frames per thread (0: 512)")
	if err := fs.Parse(args); err != nil {
		return &usageError{err.Error()}
	}
	if (*pid == 0) == (*core == "") {
		return &usageError{"give exactly one of -p PID and --core FILE"}
	}
	if fs.NArg() > 0 {
		return &usageError{"unexpected argument " + strconv.Quote(fs.Arg(0))}
	}
	opts := &snapshot.Options{MaxFrames: *maxFrames, Exe: *exe, Root: *root}
	t0 := time.Now()
	var snap *snapshot.Snapshot
	var err error
	if *core != "" {
		snap, err = snapshot.Core(*core, opts)
	} else {
		snap, err = snapshot.Process(*pid, opts)
	}
	if err != nil {
		return err
	}
	t1 := time.Now()
	if *out != "" {
		err = writeSnapshot(snap, *out)
	} else {
		bw := bufio.NewWriterSize(stdout, 64<<10)
		err = printSnapshot(bw, snap, !*noSyms)
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

// printSnapshot prints snap as eu-stack does: "TID n:" and one
// "#i  0xPC function" line per frame. Without a function name a frame
// shows module+offset (the module-relative address of format/SPEC.md).
func printSnapshot(w io.Writer, snap *snapshot.Snapshot, symbols bool) error {
	syms := &snapSymbolizer{srcs: map[*snapshot.Module]symbolizer.Source{}}
	defer syms.close()
	fmt.Fprintf(w, "PID %d - process\n", snap.Pid)
	var frames []symbolizer.Frame
	for _, t := range snap.Threads {
		fmt.Fprintf(w, "TID %d:\n", t.Tid)
		if t.Err != nil {
			fmt.Fprintf(w, "  (%v)\n", t.Err)
			continue
		}
		for i, pc := range t.PCs {
			fmt.Fprintf(w, "#%-2d 0x%016x", i, pc)
			m := snap.Module(pc)
			look := pc
			if i > 0 {
				look-- // a return address: symbolize the call
			}
			name := ""
			if m != nil && symbols {
				frames = syms.symbolize(m, look, frames[:0])
				if len(frames) > 0 {
					name = frames[len(frames)-1].Function
				}
			}
			switch {
			case name != "":
				fmt.Fprintf(w, " %s\n", name)
			case m != nil && m.HaveBias:
				fmt.Fprintf(w, " %s+%#x\n", filepath.Base(m.Path), pc-m.Bias)
			case m != nil:
				fmt.Fprintf(w, " %s@%#x\n", filepath.Base(m.Path), pc-m.Start)
			default:
				fmt.Fprintln(w)
			}
		}
		if t.Stop != 0 && t.Stop.String() != "outermost frame" {
			fmt.Fprintf(w, "    (unwind stopped: %v)\n", t.Stop)
		}
	}
	return nil
}

// snapSymbolizer opens an ELF source per module file, with the separate
// debug file from /usr/lib/debug/.build-id when there is one.
type snapSymbolizer struct {
	srcs  map[*snapshot.Module]symbolizer.Source
	files map[string]symbolizer.Source
}

func (s *snapSymbolizer) symbolize(m *snapshot.Module, pc uint64, dst []symbolizer.Frame) []symbolizer.Frame {
	if !m.HaveBias || m.File == "" {
		return dst
	}
	src, ok := s.srcs[m]
	if !ok {
		if s.files == nil {
			s.files = map[string]symbolizer.Source{}
		}
		if src, ok = s.files[m.File]; !ok {
			var o elfsrc.Options
			if len(m.BuildID) > 1 {
				h := hex.EncodeToString(m.BuildID)
				dbg := "/usr/lib/debug/.build-id/" + h[:2] + "/" + h[2:] + ".debug"
				if _, err := os.Stat(dbg); err == nil {
					o.DebugFile = dbg
				}
			}
			es, err := elfsrc.Open(m.File, &o)
			if err == nil {
				src = es
			}
			s.files[m.File] = src
		}
		s.srcs[m] = src
	}
	if src == nil {
		return dst
	}
	out, err := src.Symbolize(pc-m.Bias, dst)
	if err != nil {
		return dst
	}
	return out
}

func (s *snapSymbolizer) close() {
	for _, src := range s.files {
		if src != nil {
			src.Close()
		}
	}
}
