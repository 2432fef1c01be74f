package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform/snapshot"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/elfsrc"
)

func init() {
	register(&command{
		name:  "snapshot",
		usage: "(-p PID | --core FILE [--exe BINARY] [--root DIR]) [-o FILE] [--no-symbols | --dwarf] [--stats] | (-p PID | --core FILE --exe BINARY) --goroutines [--group]",
		short: "print the stacks of all threads (or, with --goroutines, all goroutines) of a live process or a core dump",
		run:   runSnapshot,
	})
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
	root := fs.String("root", "", "with --core: a sysroot prepended to the paths the core names")
	out := fs.String("o", "", "write an event stream to FILE instead of printing")
	noSyms := fs.Bool("no-symbols", false, "print module+offset instead of function names")
	dwarf := fs.Bool("dwarf", false, "name functions from DWARF too, with the innermost inlined function and its file:line (slower: indexes debug info)")
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
	// A snapshot is short-lived and its heap small (stack pages, the
	// unwind and symbol tables of a few modules), yet it outgrows the
	// collector's first 4 MB goal: a collection then costs more than the
	// memory it would save.
	debug.SetGCPercent(400)
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
		mode := symtabNames
		if *noSyms {
			mode = noNames
		} else if *dwarf {
			mode = dwarfNames
		}
		err = printSnapshot(bw, snap, mode)
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
	dwarfNames // elfsrc: DWARF, inlined functions, file:line
)

// printSnapshot prints snap as eu-stack does: "TID n:" and one
// "#i  0xPC function" line per frame. Without a function name a frame
// shows module+offset (the module-relative address of format/SPEC.md).
func printSnapshot(w io.Writer, snap *snapshot.Snapshot, mode nameMode) error {
	var names *frameNamer
	if mode != noNames {
		names = newFrameNamer(snap, mode == dwarfNames)
		defer names.close()
	}
	// Lines are appended with strconv rather than fmt: a hundred threads
	// print thousands of frames, and fmt was a tenth of a snapshot's CPU.
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
		for i, pc := range t.PCs {
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

// frameNamer names frames by module. The files of every module a stack
// touches are opened up front, concurrently.
type frameNamer struct {
	srcs map[string]namer // by module file
}

type namer interface {
	name(addr uint64) (fn, where string)
	close()
}

func newFrameNamer(snap *snapshot.Snapshot, dwarf bool) *frameNamer {
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
			dbg := debugFileFor(m.BuildID)
			if dwarf {
				if src, err := elfsrc.Open(m.File, &elfsrc.Options{DebugFile: dbg}); err == nil {
					out[i] = &dwarfNamer{src: src}
				}
				return
			}
			// A separate debug file holds the full .symtab of a stripped
			// library, with its local functions.
			for _, p := range []string{dbg, m.File} {
				if p == "" {
					continue
				}
				if st, err := namesFromSymtab(p, want[m.File]); err == nil && st != nil {
					out[i] = st
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

// debugFileFor returns the separate debug file of a build id under
// /usr/lib/debug/.build-id, or "".
func debugFileFor(id []byte) string {
	if len(id) < 2 {
		return ""
	}
	h := hex.EncodeToString(id)
	p := "/usr/lib/debug/.build-id/" + h[:2] + "/" + h[2:] + ".debug"
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
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

type dwarfNamer struct {
	src *elfsrc.Source
	buf []symbolizer.Frame
}

func (d *dwarfNamer) name(addr uint64) (string, string) {
	fr, err := d.src.Symbolize(addr, d.buf[:0])
	d.buf = fr
	if err != nil || len(fr) == 0 {
		return "", ""
	}
	where := ""
	if fr[0].File != "" && fr[0].Line > 0 {
		where = fmt.Sprintf("%s:%d", fr[0].File, fr[0].Line)
		if len(fr) > 1 {
			where = fr[0].Function + " inlined at " + where
		}
	}
	return fr[len(fr)-1].Function, where
}

func (d *dwarfNamer) close() { d.src.Close() }

// symNames is the names of the frames of one ELF file, by link-time
// address, chosen from its symbol table as eu-stack names frames; it knows
// only the addresses it was built for (see [namesFromSymtab]).
type symNames map[uint64]string

// symRank orders aliases at one address the way eu-stack tends to name
// them: global or weak before local, the default version before an older
// one, fewer leading underscores ("read" before "__read").
func symRank(name string, info byte) int {
	r := 0
	if b := elf.ST_BIND(info); b == elf.STB_GLOBAL || b == elf.STB_WEAK {
		r += 100
	}
	if !strings.Contains(name, "@") || strings.Contains(name, "@@") {
		r += 10
	}
	r -= len(name) - len(strings.TrimLeft(name, "_"))
	return r
}

// symtab is a symbol table walked without building a Symbol, or a name
// string, per entry: libc's debug file has tens of thousands, and a
// snapshot names a few dozen addresses.
type symtab struct {
	n    int
	each func(fn func(k int, value, size uint64, info byte, shndx elf.SectionIndex))
	name func(k int) string
}

// fileSymtab returns the .symtab of f, or its .dynsym where it has none.
func fileSymtab(f *elf.File) (*symtab, error) {
	var sec *elf.Section
	for _, s := range f.Sections {
		if s.Type == elf.SHT_SYMTAB {
			sec = s
			break
		}
	}
	if sec != nil && f.Class == elf.ELFCLASS64 && int(sec.Link) > 0 && int(sec.Link) < len(f.Sections) {
		data, err := sec.Data()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sec.Name, err)
		}
		str, err := f.Sections[sec.Link].Data()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Sections[sec.Link].Name, err)
		}
		const size = 24 // Elf64_Sym
		bo := f.ByteOrder
		if n := len(data) / size; n > 1 { // entry 0 is the null symbol
			return &symtab{
				n: n,
				each: func(fn func(k int, value, size uint64, info byte, shndx elf.SectionIndex)) {
					for k := 1; k < n; k++ {
						e := data[k*size : (k+1)*size]
						fn(k, bo.Uint64(e[8:]), bo.Uint64(e[16:]), e[4], elf.SectionIndex(bo.Uint16(e[6:])))
					}
				},
				name: func(k int) string {
					off := uint64(bo.Uint32(data[k*size:]))
					if off >= uint64(len(str)) {
						return ""
					}
					b := str[off:]
					if i := bytes.IndexByte(b, 0); i >= 0 {
						b = b[:i]
					}
					return string(b)
				},
			}, nil
		}
	}
	syms, err := f.Symbols()
	if err != nil || len(syms) == 0 {
		syms, err = f.DynamicSymbols()
	}
	if err != nil {
		return nil, err
	}
	return &symtab{
		n: len(syms),
		each: func(fn func(k int, value, size uint64, info byte, shndx elf.SectionIndex)) {
			for k, s := range syms {
				fn(k, s.Value, s.Size, s.Info, s.Section)
			}
		},
		name: func(k int) string { return syms[k].Name },
	}, nil
}

// namesFromSymtab names the link-time addresses addrs from the symbol table of
// the ELF file at path, as eu-stack does: the function symbol starting
// nearest at or below an address names it if its range holds the address
// (or it has no size); of several at one address the largest, then the
// best ranked ([symRank]). It returns nil when the file has no function
// symbols. Two passes over the table, with no sort of it: the first finds
// the nearest start below each address, the second the best symbol at
// each of those starts.
func namesFromSymtab(path string, addrs []uint64) (symNames, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := fileSymtab(f)
	if err != nil {
		return nil, err
	}
	// Functions, and untyped symbols in code (the Go linker's).
	isFunc := func(value, size uint64, info byte, shndx elf.SectionIndex) bool {
		if shndx == elf.SHN_UNDEF || int(shndx) >= len(f.Sections) || value == 0 {
			return false
		}
		switch elf.ST_TYPE(info) {
		case elf.STT_FUNC, elf.STT_GNU_IFUNC:
			return true
		case elf.STT_NOTYPE:
			return f.Sections[shndx].Flags&elf.SHF_EXECINSTR != 0 && size != 0
		}
		return false
	}
	pcs := append([]uint64(nil), addrs...)
	slices.Sort(pcs)
	pcs = slices.Compact(pcs)
	// near[i]: the highest symbol start in (pcs[i-1], pcs[i]].
	near := make([]uint64, len(pcs))
	has := make([]bool, len(pcs))
	funcs := 0
	st.each(func(k int, value, size uint64, info byte, shndx elf.SectionIndex) {
		if !isFunc(value, size, info, shndx) {
			return
		}
		funcs++
		i, _ := slices.BinarySearch(pcs, value)
		if i < len(pcs) && (!has[i] || value > near[i]) {
			near[i], has[i] = value, true
		}
	})
	if funcs == 0 {
		return nil, nil
	}
	type best struct {
		size uint64
		rank int
		k    int // -1: none yet
		name string
	}
	starts := map[uint64]*best{}
	for i := range pcs {
		if has[i] {
			starts[near[i]] = &best{k: -1}
		}
	}
	st.each(func(k int, value, size uint64, info byte, shndx elf.SectionIndex) {
		b := starts[value]
		if b == nil || !isFunc(value, size, info, shndx) || b.k >= 0 && size < b.size {
			return
		}
		name := st.name(k)
		rank := symRank(name, info)
		if b.k < 0 || size > b.size || rank > b.rank {
			*b = best{size: size, rank: rank, k: k, name: name}
		}
	})
	names := symNames{}
	var start uint64
	found := false
	for i, pc := range pcs {
		if has[i] {
			start, found = near[i], true
		}
		if !found {
			continue
		}
		if b := starts[start]; pc < start+b.size || b.size == 0 {
			names[pc] = symbolizer.Demangle(b.name)
		}
	}
	return names, nil
}

func (n symNames) name(addr uint64) (string, string) { return n[addr], "" }

func (n symNames) close() {}
