// Package gopclntab symbolizes Go binaries from their runtime tables
// (.gopclntab), which the Go linker keeps even in stripped binaries
// (-ldflags=-s -w): function names, files and lines, and the inline tree
// (FUNCDATA_InlTree with PCDATA_InlTreeIndex), so inlined calls come back
// as frames of their own.
//
// Supported: the table layouts of Go 1.18–1.19 (magic 0xfffffff0) and Go
// 1.20 and later (magic 0xfffffff1). The standard library's debug/gosym
// reads names and lines but not the inline tree, hence this package.
package gopclntab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// FormatError reports malformed table bytes at an offset of .gopclntab.
type FormatError struct {
	Offset uint64
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("gopclntab: offset %#x: %s", e.Offset, e.Msg)
}

// ErrUnsupported says the table is of a Go version this package does not read.
var ErrUnsupported = errors.New("gopclntab: unsupported pclntab version")

const (
	magic118 = 0xfffffff0
	magic120 = 0xfffffff1

	pcdataInlTreeIndex = 2
	funcdataInlTree    = 3

	maxFuncs = 1 << 24
	maxDepth = 64 // inline levels followed for one address
)

// Table is a decoded .gopclntab.
type Table struct {
	data      []byte
	bo        binary.ByteOrder
	ver       int // 118 or 120
	quantum   uint32
	ptrSize   int
	nfunc     int
	textStart uint64
	funcnames []byte
	cutab     []byte
	filetab   []byte
	pctab     []byte
	functab   []byte // nfunc+1 pairs of uint32, then the _func records

	// Inline trees live in go:func.*; gofunc is its address and rodata
	// reads memory of the file at a virtual address. Both may be nil,
	// and then inlined frames are not reported.
	gofunc uint64
	read   func(addr uint64, p []byte) bool
}

// Frame is one frame of a Go address: innermost inlined function first.
type Frame struct {
	Function string
	File     string
	Line     int
}

// Parse decodes the table in data (the contents of .gopclntab). text is
// the address of the text segment's start (runtime.text, the .text
// section of an ELF file): the header's copy may be unrelocated, as
// debug/gosym notes too; 0 means trust the header. readMem,
// if not nil, reads the file's memory image at a virtual address; gofunc
// is the address of go:func.* (see FindGoFunc). Without them inlined
// frames are folded into their caller.
func Parse(data []byte, bo binary.ByteOrder, text, gofunc uint64, readMem func(addr uint64, p []byte) bool) (*Table, error) {
	if len(data) < 8 {
		return nil, &FormatError{0, "header truncated"}
	}
	t := &Table{data: data, bo: bo, gofunc: gofunc, read: readMem}
	switch bo.Uint32(data) {
	case magic118:
		t.ver = 118
	case magic120:
		t.ver = 120
	default:
		return nil, fmt.Errorf("%w (magic %#x)", ErrUnsupported, bo.Uint32(data))
	}
	t.quantum = uint32(data[6])
	t.ptrSize = int(data[7])
	if t.ptrSize != 4 && t.ptrSize != 8 {
		return nil, &FormatError{7, fmt.Sprintf("pointer size %d", t.ptrSize)}
	}
	if t.quantum == 0 {
		return nil, &FormatError{6, "zero instruction quantum"}
	}
	word := func(i int) (uint64, error) {
		off := 8 + i*t.ptrSize
		if off+t.ptrSize > len(data) {
			return 0, &FormatError{uint64(off), "header truncated"}
		}
		if t.ptrSize == 8 {
			return bo.Uint64(data[off:]), nil
		}
		return uint64(bo.Uint32(data[off:])), nil
	}
	var w [8]uint64
	for i := range w {
		v, err := word(i)
		if err != nil {
			return nil, err
		}
		w[i] = v
	}
	if w[0] > maxFuncs {
		return nil, &FormatError{8, fmt.Sprintf("%d functions", w[0])}
	}
	t.nfunc = int(w[0])
	t.textStart = w[2]
	if text != 0 {
		t.textStart = text
	}
	sub := func(i int, from, to uint64) ([]byte, error) {
		if from > to || to > uint64(len(data)) {
			return nil, &FormatError{uint64(8 + i*t.ptrSize), fmt.Sprintf("table [%#x, %#x) outside %d bytes", from, to, len(data))}
		}
		return data[from:to], nil
	}
	// Tables follow each other in this order: funcnames, cutab, filetab,
	// pctab, functab (to the end).
	var err error
	if t.funcnames, err = sub(3, w[3], w[4]); err != nil {
		return nil, err
	}
	if t.cutab, err = sub(4, w[4], w[5]); err != nil {
		return nil, err
	}
	if t.filetab, err = sub(5, w[5], w[6]); err != nil {
		return nil, err
	}
	if t.pctab, err = sub(6, w[6], w[7]); err != nil {
		return nil, err
	}
	if t.functab, err = sub(7, w[7], uint64(len(data))); err != nil {
		return nil, err
	}
	if uint64(len(t.functab)) < uint64(t.nfunc+1)*8 {
		return nil, &FormatError{w[7], "function table truncated"}
	}
	return t, nil
}

func (t *Table) u32(b []byte, off uint64) (uint32, bool) {
	if off+4 > uint64(len(b)) || off+4 < off {
		return 0, false
	}
	return t.bo.Uint32(b[off:]), true
}

// funcInfo is the part of a _func record the symbolizer needs.
type funcInfo struct {
	entry    uint64
	nameOff  uint32
	pcsp     uint32
	pcfile   uint32
	pcln     uint32
	cuOffset uint32
	off      uint64 // of the record in functab
	npcdata  uint32
	nfdata   uint8
}

// find returns the function containing pc.
func (t *Table) find(pc uint64) (funcInfo, bool) {
	if pc < t.textStart || t.nfunc == 0 {
		return funcInfo{}, false
	}
	rel := pc - t.textStart
	if rel > 0xffffffff {
		return funcInfo{}, false
	}
	entryAt := func(i int) uint32 { return t.bo.Uint32(t.functab[i*8:]) }
	i := sort.Search(t.nfunc, func(i int) bool { return uint64(entryAt(i)) > rel }) - 1
	if i < 0 || uint64(entryAt(t.nfunc)) <= rel {
		return funcInfo{}, false
	}
	foff := uint64(t.bo.Uint32(t.functab[i*8+4:]))
	ft := t.functab
	// entryOff, nameOff, args, deferreturn, pcsp, pcfile, pcln, npcdata, cuOffset, [startLine], funcID, flag, _, nfuncdata
	var f funcInfo
	var ok [8]bool
	var entryOff uint32
	entryOff, ok[0] = t.u32(ft, foff)
	f.nameOff, ok[1] = t.u32(ft, foff+4)
	f.pcfile, ok[2] = t.u32(ft, foff+20)
	f.pcln, ok[3] = t.u32(ft, foff+24)
	f.npcdata, ok[4] = t.u32(ft, foff+28)
	f.cuOffset, ok[5] = t.u32(ft, foff+32)
	nfOff := foff + 39
	if t.ver >= 120 {
		nfOff += 4
	}
	ok[6] = nfOff < uint64(len(ft))
	ok[7] = true
	for _, b := range ok {
		if !b {
			return funcInfo{}, false
		}
	}
	f.nfdata = ft[nfOff]
	f.pcsp, _ = t.u32(ft, foff+16)
	f.entry = t.textStart + uint64(entryOff)
	f.off = foff
	if f.entry > pc {
		return funcInfo{}, false
	}
	return f, true
}

func (t *Table) headerSize() uint64 {
	if t.ver >= 120 {
		return 44
	}
	return 40
}

// pcdata returns the offset into pctab of table i of f, 0 if none.
func (t *Table) pcdata(f funcInfo, i uint32) uint32 {
	if i >= f.npcdata {
		return 0
	}
	v, _ := t.u32(t.functab, f.off+t.headerSize()+uint64(i)*4)
	return v
}

// funcdata returns the offset (from gofunc) of funcdata i of f.
func (t *Table) funcdata(f funcInfo, i uint8) (uint32, bool) {
	if i >= f.nfdata {
		return 0, false
	}
	v, ok := t.u32(t.functab, f.off+t.headerSize()+uint64(f.npcdata)*4+uint64(i)*4)
	if !ok || v == 0xffffffff {
		return 0, false
	}
	return v, true
}

// pcvalue decodes pctab table at off for f and returns the value at pc,
// -1 if pc is not covered.
func (t *Table) pcvalue(off uint32, entry, pc uint64) int64 {
	if off == 0 {
		return -1
	}
	p := uint64(off)
	val := int64(-1)
	cur := entry
	first := true
	for steps := 0; steps < 1<<20; steps++ {
		uv, n := binary.Uvarint(t.pctab[min(p, uint64(len(t.pctab))):])
		if n <= 0 {
			return -1
		}
		p += uint64(n)
		if uv == 0 && !first {
			return -1
		}
		first = false
		// zig-zag value delta
		d := int64(uv >> 1)
		if uv&1 != 0 {
			d = ^d
		}
		val += d
		pd, n := binary.Uvarint(t.pctab[min(p, uint64(len(t.pctab))):])
		if n <= 0 {
			return -1
		}
		p += uint64(n)
		cur += pd * uint64(t.quantum)
		if pc < cur {
			return val
		}
	}
	return -1
}

func cstr(b []byte, off uint64) string {
	if off >= uint64(len(b)) {
		return ""
	}
	s := b[off:]
	for i, c := range s {
		if c == 0 {
			return string(s[:i])
		}
	}
	return string(s)
}

func (t *Table) funcName(nameOff uint32) string { return cstr(t.funcnames, uint64(nameOff)) }

func (t *Table) fileLine(f funcInfo, pc uint64) (string, int) {
	line := t.pcvalue(f.pcln, f.entry, pc)
	fno := t.pcvalue(f.pcfile, f.entry, pc)
	file := ""
	if fno >= 0 {
		if off, ok := t.u32(t.cutab, (uint64(f.cuOffset)+uint64(fno))*4); ok && off != 0xffffffff {
			file = cstr(t.filetab, uint64(off))
		}
	}
	if line < 0 {
		line = 0
	}
	return file, int(line)
}

// Symbolize appends the frames of pc, innermost first, and reports
// whether pc lies in a function.
func (t *Table) Symbolize(pc uint64, dst []Frame) ([]Frame, bool) {
	f, ok := t.find(pc)
	if !ok {
		return dst, false
	}
	cur := pc
	if t.read != nil {
		if inl, ok := t.funcdata(f, funcdataInlTree); ok {
			tree := t.gofunc + uint64(inl)
			for depth := 0; depth < maxDepth; depth++ {
				ix := t.pcvalue(t.pcdata(f, pcdataInlTreeIndex), f.entry, cur)
				if ix < 0 {
					break
				}
				nameOff, parentPC, ok := t.inlinedCall(tree, uint64(ix))
				if !ok {
					break
				}
				file, line := t.fileLine(f, cur)
				dst = append(dst, Frame{Function: t.funcName(nameOff), File: file, Line: line})
				next := f.entry + uint64(parentPC)
				if next == cur || parentPC < 0 {
					break
				}
				cur = next
			}
		}
	}
	file, line := t.fileLine(f, cur)
	return append(dst, Frame{Function: t.funcName(f.nameOff), File: file, Line: line}), true
}

// Func is the function containing a pc, as an unwinder needs it.
type Func struct {
	Entry uint64
	Name  string
}

// FuncAt returns the (outermost, not inlined) function containing pc.
func (t *Table) FuncAt(pc uint64) (Func, bool) {
	f, ok := t.find(pc)
	if !ok {
		return Func{}, false
	}
	return Func{Entry: f.entry, Name: t.funcName(f.nameOff)}, true
}

// SPDelta returns how many bytes the function containing pc has pushed
// on the stack at pc (its pcsp table): on amd64 a frame whose stack
// pointer at pc is sp has its return address at sp+SPDelta and its
// caller's stack pointer at sp+SPDelta+8, as the runtime's own
// traceback unwinds Go code.
func (t *Table) SPDelta(pc uint64) (int64, bool) {
	f, ok := t.find(pc)
	if !ok {
		return 0, false
	}
	if pc == f.entry {
		return 0, true
	}
	v := t.pcvalue(f.pcsp, f.entry, pc)
	return v, v >= 0
}

// inlinedCall reads entry ix of the inline tree at address tree.
func (t *Table) inlinedCall(tree, ix uint64) (nameOff uint32, parentPC int32, ok bool) {
	if t.ver >= 120 {
		// funcID uint8, _ [3]byte, nameOff int32, parentPc int32, startLine int32
		var b [16]byte
		if ix > 1<<24 || !t.read(tree+ix*16, b[:]) {
			return 0, 0, false
		}
		return t.bo.Uint32(b[4:]), int32(t.bo.Uint32(b[8:])), true
	}
	// parent int16, funcID uint8, _ byte, file int32, line int32, func_ int32, parentPc int32
	var b [20]byte
	if ix > 1<<24 || !t.read(tree+ix*20, b[:]) {
		return 0, 0, false
	}
	return t.bo.Uint32(b[12:]), int32(t.bo.Uint32(b[16:])), true
}

// Moduledata field positions (in pointer-sized words) of the fields
// FindGoFunc checks, per layout.
type mdLayout struct{ text, gofunc int }

var layouts = []mdLayout{
	{text: 22, gofunc: 40}, // Go 1.20+: covctrs added before end
	{text: 22, gofunc: 38}, // Go 1.18–1.19
}

// FindGoFunc finds the address of go:func.* in a stripped binary: it
// scans data (the contents of a data section at address dataAddr) for the
// runtime's moduledata, whose first word points at the pclntab and whose
// text field equals the table's text start.
func (t *Table) FindGoFunc(pclntabAddr uint64, data []byte) (uint64, bool) {
	ps := t.ptrSize
	word := func(off int) uint64 { return word(t.bo, ps, data, off) }
	for off := 0; off+ps <= len(data); off += ps {
		if word(off) != pclntabAddr {
			continue
		}
		for _, l := range layouts {
			if word(off+l.text*ps) == t.textStart {
				if g := word(off + l.gofunc*ps); g != 0 {
					return g, true
				}
			}
		}
	}
	return 0, false
}

// Function flags of the runtime's _func.flag (internal/abi.FuncFlag),
// the same bits in every layout this package reads.
const (
	// FlagTopFrame: the function is the outermost frame of its stack
	// (runtime.goexit, mstart, rt0_go).
	FlagTopFrame = 1 << 0
	// FlagSPWrite: the function writes the stack pointer other than by
	// growing or shrinking its own frame: it may switch stacks
	// (runtime.systemstack, asmcgocall, mcall, morestack, gogo, the vDSO
	// callers), so its frame cannot be stepped by its frame size.
	FlagSPWrite = 1 << 1
	// FlagAsm: the function is written in assembly.
	FlagAsm = 1 << 2
)

// FuncRange is one function of the table: its code [Entry, End), name
// and flags.
type FuncRange struct {
	Entry, End uint64
	Name       string
	Flag       uint8
}

// Text returns the code range the table covers: the first function's
// entry and the end of the last one.
func (t *Table) Text() (start, end uint64) {
	if t.nfunc == 0 {
		return 0, 0
	}
	return t.textStart + uint64(t.bo.Uint32(t.functab)), t.textStart + uint64(t.bo.Uint32(t.functab[t.nfunc*8:]))
}

// Funcs calls yield for each function whose flags have a bit of mask
// set (every function when mask is 0), in address order, until yield
// returns false. Names are read only for the functions yielded.
func (t *Table) Funcs(mask uint8, yield func(FuncRange) bool) {
	flagOff := uint64(37)
	if t.ver >= 120 {
		flagOff += 4 // startLine
	}
	ft := t.functab
	for i := 0; i < t.nfunc; i++ {
		foff := uint64(t.bo.Uint32(ft[i*8+4:]))
		if foff+flagOff >= uint64(len(ft)) {
			continue
		}
		flag := ft[foff+flagOff]
		if mask != 0 && flag&mask == 0 {
			continue
		}
		nameOff, _ := t.u32(ft, foff+4)
		f := FuncRange{
			Entry: t.textStart + uint64(t.bo.Uint32(ft[i*8:])),
			End:   t.textStart + uint64(t.bo.Uint32(ft[(i+1)*8:])),
			Name:  t.funcName(nameOff),
			Flag:  flag,
		}
		if f.End < f.Entry {
			continue
		}
		if !yield(f) {
			return
		}
	}
}

// SPDeltas calls yield for each run of the function at entry's pcsp
// table, in address order: the code [start, end) pushed delta bytes
// (see [Table.SPDelta]). It stops early when yield returns false.
func (t *Table) SPDeltas(entry uint64, yield func(start, end uint64, delta int64) bool) {
	f, ok := t.find(entry)
	if !ok || f.entry != entry || f.pcsp == 0 {
		return
	}
	p := uint64(f.pcsp)
	val, cur := int64(-1), entry
	for steps := 0; steps < 1<<16; steps++ {
		uv, n := binary.Uvarint(t.pctab[min(p, uint64(len(t.pctab))):])
		if n <= 0 || uv == 0 && steps > 0 {
			return
		}
		p += uint64(n)
		d := int64(uv >> 1)
		if uv&1 != 0 {
			d = ^d
		}
		val += d
		pd, n := binary.Uvarint(t.pctab[min(p, uint64(len(t.pctab))):])
		if n <= 0 {
			return
		}
		p += uint64(n)
		next := cur + pd*uint64(t.quantum)
		if val >= 0 && !yield(cur, next, val) {
			return
		}
		cur = next
	}
}
