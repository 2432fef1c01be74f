package main

import (
	"bufio"
	"bytes"
	"flag"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/sources"
)

var addr2lineCmd = command{
	name:  "addr2line",
	usage: "--obj BINARY [--no-inlines] [--debug-file FILE] [--debug-file-directory DIR]... [--no-debuginfod] [ADDR...]",
	short: "symbolize addresses of a binary, printing what llvm-symbolizer prints",
	run:   runAddr2line,
}

func runAddr2line(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("addr2line", flag.ContinueOnError)
	fs.SetOutput(stderr)
	obj := fs.String("obj", "", "the ELF binary whose addresses (file virtual addresses) are given")
	fs.StringVar(obj, "e", "", "same as --obj")
	inlines := fs.Bool("inlines", true, "print one function and location per inlined frame (llvm-symbolizer's default)")
	noInlines := fs.Bool("no-inlines", false, "print only the innermost frame")
	debugFile := fs.String("debug-file", "", "separate debug file holding the binary's DWARF (PE: the PDB to use)")
	workers := fs.Int("j", runtime.NumCPU(), "compile units parsed in parallel")
	var debugDirs multiFlag
	fs.Var(&debugDirs, "debug-file-directory", "directory of separate debug files (ELF: DIR/.build-id/xx/rest.debug and .gnu_debuglink names; PE: PDBs), searched before /usr/lib/debug (repeatable; llvm-symbolizer's spelling)")
	fs.Var(&debugDirs, "debug-dir", "same as --debug-file-directory")
	noDebuginfod := fs.Bool("no-debuginfod", false, "do not ask DEBUGINFOD_URLS servers for a missing debug file")
	if err := fs.Parse(args); err != nil {
		return &usageError{err.Error()}
	}
	if *obj == "" {
		return &usageError{"--obj is required"}
	}
	// A batch run builds tables once and keeps them: collect garbage
	// only if the heap grows past 2 GiB.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(2 << 30)
	// The one location path report uses: ELF by build id under the debug
	// directories, .gnu_debuglink, debuginfod; PE with its PDB (given,
	// next to the image, in the debug directories, at the path the image
	// records or along _NT_SYMBOL_PATH), its DWARF, Go's tables and its
	// symbol tables, per address.
	src, err := sources.OpenFile(*obj, &symbolizer.Options{DebugDirs: debugDirs, NoDebuginfod: *noDebuginfod}, *debugFile)
	if err != nil {
		return err
	}
	defer src.Close()
	out := bufio.NewWriterSize(stdout, 64<<10)
	defer out.Flush()
	p := &a2lPrinter{src: src, w: out, inlines: *inlines && !*noInlines}
	if fs.NArg() > 0 {
		for _, a := range fs.Args() {
			p.line(a)
		}
		return nil
	}
	// Read the whole batch first so the compile units it needs are
	// parsed on all cores, then answer in input order.
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var lines []string
	var addrs []uint64
	for sc.Scan() {
		l := sc.Text()
		lines = append(lines, l)
		if a, err := strconv.ParseUint(strings.TrimSpace(l), 0, 64); err == nil {
			addrs = append(addrs, a)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if pf, ok := src.(interface{ Prefetch([]uint64, int) }); ok {
		pf.Prefetch(addrs, *workers)
	}
	// Symbolize chunks of the batch on all cores (demangling is the
	// other big cost), then print them in input order.
	const chunk = 512
	outs := make([][]byte, (len(lines)+chunk-1)/chunk)
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < max(*workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf bytes.Buffer
			q := &a2lPrinter{src: src, w: bufio.NewWriter(&buf), inlines: p.inlines}
			for c := range next {
				buf.Reset()
				for _, l := range lines[c*chunk : min((c+1)*chunk, len(lines))] {
					q.line(l)
				}
				q.w.Flush()
				outs[c] = append([]byte(nil), buf.Bytes()...)
			}
		}()
	}
	for c := range outs {
		next <- c
	}
	close(next)
	wg.Wait()
	for _, o := range outs {
		out.Write(o)
	}
	return nil
}

type a2lPrinter struct {
	src     symbolizer.Source
	w       *bufio.Writer
	inlines bool
	frames  []symbolizer.Frame
	buf     []byte
}

// line symbolizes one input item. Like llvm-symbolizer, a number is read
// with C-style radix prefixes (0x hex, 0 octal, else decimal) and input
// that is not a number is echoed back.
func (p *a2lPrinter) line(s string) {
	s = strings.TrimSpace(s)
	addr, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		p.w.WriteString(s)
		p.w.WriteByte('\n')
		return
	}
	p.frames, _ = p.src.Symbolize(addr, p.frames[:0])
	fr := p.frames
	if len(fr) == 0 {
		fr = append(fr, symbolizer.Frame{})
	}
	if !p.inlines {
		// llvm-symbolizer --no-inlines names the outermost function (the
		// symbol) at the innermost location.
		f := fr[0]
		f.Function = fr[len(fr)-1].Function
		fr = []symbolizer.Frame{f}
	}
	p.buf = symbolizer.AppendLLVM(p.buf[:0], fr)
	p.w.Write(p.buf)
}
