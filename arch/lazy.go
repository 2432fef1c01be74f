package arch

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"sync"
	"unsafe"
)

// Lazy tables. A recorder that samples a whole host meets hundreds of
// modules and, in each, runs a few dozen functions; parsing all of a
// module's .eh_frame the first time a sample passes through it (libc:
// 3000 FDEs, 28000 rows, milliseconds) is most of what unwinding costs it.
// .eh_frame_hdr holds a table of every FDE's start address sorted for
// binary search, which the unwinders of C runtimes use for exactly this:
// a lazy Table keeps .eh_frame's bytes and that table, and parses an FDE,
// with the same parser as NewTable, the first time an address in it is
// looked up. Lookups return what NewTable's table returns for every
// address (a test holds them equal on real libraries), except where
// FDEs overlap, which linkers do not produce: NewTable keeps the first,
// a lazy table the one the search table finds.

// lazyMinEHFrame is the .eh_frame size below which a lazy table is not
// worth it: the whole section parses in microseconds.
const lazyMinEHFrame = 4 << 10

// lazyIndex is a lazy Table's state.
type lazyIndex struct {
	mu   sync.Mutex
	p    *sectionParser // over the section; its builder holds the parsed rows
	pcs  []uint64       // FDE start addresses, sorted
	offs []uint32       // and their FDEs' offsets in the section
	// Or, indexed by .eh_frame_hdr, its search table as it is (8 bytes an
	// FDE: sdata4 start and FDE address, relative to tabAddr), read in
	// place: a copy cost 12 bytes an FDE (libLLVM has 100000), and a
	// recorder maps the file and touches only the pages a search does.
	tab     []byte
	tabAddr uint64
	parsed  map[int]int32 // index → index in p.b.fdes, or -1: no usable FDE
	stubs   []Stub
	size    int // bytes of the index and the section
}

// NewLazyTableELF is NewTableELF for a recorder: it reads f's unwind
// sections (and .eh_frame_hdr) and returns [NewLazyTable]'s table.
func NewLazyTableELF(f *elf.File, path string) (*Table, error) {
	return NewLazyTableELFMapped(f, path, nil)
}

// NewLazyTableELFMapped is [NewLazyTableELF] over file, the bytes of f's
// whole file (a read-only mapping of it): the table keeps slices of file
// for the uncompressed sections it reads instead of copies, so that a
// recorder that unwinds every binary of a host holds in memory only the
// pages its lookups touch. file must outlive the table; sections that are
// compressed or lie outside file are read as NewLazyTableELF reads them.
func NewLazyTableELFMapped(f *elf.File, path string, file []byte) (*Table, error) {
	s := Sections{File: path}
	a, err := elfArch(f, path)
	if err != nil {
		return nil, err
	}
	s.Arch = a
	if f.ByteOrder != binary.LittleEndian {
		return newTableELF(f, path, file)
	}
	df := f.Section(".debug_frame")
	if df != nil && (f.Section(".eh_frame") != nil || hasEHFrameSegment(f)) {
		return newTableELF(f, path, file) // both: NewTable merges them
	}
	if df != nil {
		s.DebugFrame = sectionData(df, file)
	} else {
		s.EHFrame, s.EHFrameAddr, s.EHFrameHdr, s.EHFrameHdrAddr = lazySections(f, file)
	}
	if len(s.EHFrame) == 0 && len(s.DebugFrame) == 0 {
		return newTableELF(f, path, file) // it says why, or has a Go binary's rules
	}
	s.Stubs = pltStubs(f, s.Arch)
	t, err := NewLazyTable(s)
	if t != nil {
		t.gort = goRuntimeELF(f, a, file)
	}
	return t, err
}

// NewLazyTable returns a Table over s that parses each FDE the first time
// an address in it is looked up, and costs until then the sections' bytes
// (which it keeps: the caller may pass mmap'd memory that outlives the
// table) and an index of the FDEs: .eh_frame_hdr's search table where
// s.EHFrameHdr holds a usable one (datarel sdata4, sorted, pointing into
// .eh_frame), else one scan of the entries' headers (Go binaries:
// .debug_frame). Its lookups equal NewTable's for every address. With
// both .eh_frame and .debug_frame, or little unwind info, it returns
// NewTable's table. Len and Row of a lazy table return no rows; it is
// safe for concurrent use (lookups that parse take a lock).
func NewLazyTable(s Sections) (*Table, error) {
	if s.Arch != AMD64 && s.Arch != ARM64 {
		return nil, fmt.Errorf("arch: %s: unsupported architecture %v", s.File, s.Arch)
	}
	switch {
	case len(s.EHFrame) > maxSection || len(s.DebugFrame) > maxSection:
		return NewTable(s) // it reports the size
	case len(s.EHFrame) >= lazyMinEHFrame && len(s.DebugFrame) == 0:
		return newLazyTable(s.Arch, s.File, s.EHFrame, s.EHFrameAddr, true, s.EHFrameHdr, s.EHFrameHdrAddr, s.Stubs), nil
	case len(s.DebugFrame) >= lazyMinEHFrame && len(s.EHFrame) == 0:
		return newLazyTable(s.Arch, s.File, s.DebugFrame, 0, false, nil, 0, s.Stubs), nil
	case len(s.EHFrame) == 0 && len(s.DebugFrame) == 0:
		return nil, fmt.Errorf("%w in %s", ErrNoUnwindInfo, s.File)
	}
	return NewTable(s)
}

func hasEHFrameSegment(f *elf.File) bool {
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_EH_FRAME {
			return true
		}
	}
	return false
}

// sectionData returns s's bytes (uncompressed), or nil: a slice of file
// (the whole file's bytes, may be nil) where it holds them as they are.
func sectionData(s *elf.Section, file []byte) []byte {
	if s == nil || s.Type == elf.SHT_NOBITS || s.Size > maxSection {
		return nil
	}
	if s.Flags&elf.SHF_COMPRESSED == 0 && s.Offset <= uint64(len(file)) && s.Size <= uint64(len(file))-s.Offset {
		return file[s.Offset : s.Offset+s.Size : s.Offset+s.Size]
	}
	d, err := s.Data()
	if err != nil || len(d) > maxSection {
		return nil
	}
	return d
}

// lazySections reads .eh_frame and .eh_frame_hdr (slices of file where it
// can, see sectionData), by section or, without
// section headers, through PT_GNU_EH_FRAME. hdr may be nil.
func lazySections(f *elf.File, file []byte) (eh []byte, ehAddr uint64, hdr []byte, hdrAddr uint64) {
	if es := f.Section(".eh_frame"); es != nil {
		eh = sectionData(es, file)
		if hs := f.Section(".eh_frame_hdr"); hs != nil {
			hdr, hdrAddr = sectionData(hs, file), hs.Addr
		}
		return eh, es.Addr, hdr, hdrAddr
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_GNU_EH_FRAME || p.Filesz > maxSection {
			continue
		}
		hdr = make([]byte, p.Filesz)
		if _, err := io.ReadFull(p.Open(), hdr); err != nil {
			return nil, 0, nil, 0
		}
		data, addr, hAddr, err := ehFrameFromSegments(f, "")
		if err != nil {
			return nil, 0, nil, 0
		}
		return data, addr, hdr, hAddr
	}
	return nil, 0, nil, 0
}

// newLazyTable returns a lazy table over the section data (.eh_frame at
// addr if eh, else .debug_frame), indexed by .eh_frame_hdr bytes hdr at
// hdrAddr when they hold a usable search table (datarel sdata4, sorted,
// pointing into the section), else by a scan of the section.
func newLazyTable(a Arch, path string, data []byte, addr uint64, eh bool, hdr []byte, hdrAddr uint64, stubs []Stub) *Table {
	sect := ".debug_frame"
	if eh {
		sect = ".eh_frame"
	}
	b := &builder{arch: a, ruleIDs: map[Rule]uint32{}}
	b.ruleID(Rule{}) // rule 0: none
	l := &lazyIndex{
		p:      &sectionParser{b: b, file: path, sect: sect, data: data, secAddr: addr, dataAddr: hdrAddr, eh: eh, cies: map[int]*cie{}},
		parsed: map[int]int32{},
		stubs:  stubs,
	}
	if !eh || !l.fromHeader(hdr, hdrAddr) {
		l.scan()
	}
	l.size = len(data) + 12*len(l.pcs) + len(l.tab)
	return &Table{Arch: a, lazy: l}
}

// fromHeader indexes the FDEs by .eh_frame_hdr's search table and reports
// whether it could.
func (l *lazyIndex) fromHeader(hdr []byte, hdrAddr uint64) bool {
	p := l.p
	h, err := ParseEHFrameHdr(p.file, hdr, hdrAddr)
	if err != nil || h.tableEnc != peDatarel|peSdata4 || h.EHFrameAddr != p.secAddr || h.FDECount == 0 {
		return false
	}
	n := int(h.FDECount) // ParseEHFrameHdr checked that the entries fit
	l.tab, l.tabAddr = hdr[h.tableOff:h.tableOff+8*n:h.tableOff+8*n], hdrAddr
	// The entries are checked as searches meet them (off, and parse's
	// range check), not all up front, which would touch every page:
	// here only that the first and last are in order and point into the
	// section.
	if l.pc(n-1) < l.pc(0) || l.off(0) < 0 || l.off(n-1) < 0 {
		l.tab = nil
		return false
	}
	return true
}

// n is the number of FDEs the index lists.
func (l *lazyIndex) n() int {
	if l.tab != nil {
		return len(l.tab) / 8
	}
	return len(l.pcs)
}

// pc is the start address of FDE i.
func (l *lazyIndex) pc(i int) uint64 {
	if l.tab != nil {
		return l.tabAddr + uint64(int64(int32(binary.LittleEndian.Uint32(l.tab[8*i:]))))
	}
	return l.pcs[i]
}

// off is the offset of FDE i in the section, or -1 when the search table
// points outside it.
func (l *lazyIndex) off(i int) int {
	if l.tab != nil {
		fde := l.tabAddr + uint64(int64(int32(binary.LittleEndian.Uint32(l.tab[8*i+4:]))))
		if fde < l.p.secAddr || fde-l.p.secAddr >= uint64(len(l.p.data)) {
			return -1
		}
		return int(fde - l.p.secAddr)
	}
	return int(l.offs[i])
}

// scan indexes the FDEs by reading each entry's header and address range
// (and parsing the CIEs, which FDEs share), without running their
// instructions.
func (l *lazyIndex) scan() {
	p := l.p
	type ent struct {
		pc  uint64
		off uint32
	}
	var ents []ent
	for off := 0; off < len(p.data); {
		_, end, isCIE, id, idOff, body, err := p.header(off)
		if err != nil || end == off+4 && p.eh {
			break // a bad length, or the terminator
		}
		if !isCIE {
			if begin, size, ok := p.fdeRange(id, idOff, body, end); ok && size > 0 && begin != 0 {
				ents = append(ents, ent{begin, uint32(off)})
			}
		}
		off = end
	}
	sort.SliceStable(ents, func(i, j int) bool { return ents[i].pc < ents[j].pc })
	l.pcs, l.offs = make([]uint64, len(ents)), make([]uint32, len(ents))
	for i, e := range ents {
		l.pcs[i], l.offs[i] = e.pc, e.off
	}
}

// ciePos returns the section offset of the CIE an FDE's id field (at
// idOff) points at, or -1.
func (p *sectionParser) ciePos(id uint64, idOff int) int {
	if p.eh {
		if id > uint64(idOff) {
			return -1
		}
		return idOff - int(id)
	}
	if id > uint64(len(p.data)) {
		return -1
	}
	return int(id)
}

// fdeRange reads an FDE's address range.
func (p *sectionParser) fdeRange(id uint64, idOff, body, end int) (begin, size uint64, ok bool) {
	cp := p.ciePos(id, idOff)
	if cp < 0 {
		return 0, 0, false
	}
	c := p.cie(cp)
	if !c.ok {
		return 0, 0, false
	}
	r := &reader{data: p.data[:end], off: body, file: p.file, sect: p.sect}
	if p.eh {
		begin = r.encoded(c.fdeEnc, c.ptrSize, p.secAddr, p.dataAddr)
		size = r.encoded(c.fdeEnc&0x0f, c.ptrSize, 0, 0)
	} else {
		begin = r.encoded(peAbsptr, c.ptrSize, 0, 0)
		size = r.encoded(peAbsptr, c.ptrSize, 0, 0)
	}
	return begin, size, r.err == nil
}

// lookup returns the rule covering the link-time address addr.
func (l *lazyIndex) lookup(addr uint64) Rule {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The last FDE starting at or below addr.
	i := sort.Search(l.n(), func(i int) bool { return l.pc(i) > addr }) - 1
	if i >= 0 {
		fi, ok := l.parsed[i]
		if !ok {
			fi = l.parse(i)
			l.parsed[i] = fi
		}
		if fi >= 0 {
			f := &l.p.b.fdes[fi]
			if addr >= f.start && addr < f.end {
				rows := l.p.b.rows[f.from:f.to]
				k := sort.Search(len(rows), func(k int) bool { return rows[k].loc > addr }) - 1
				if k >= 0 {
					return l.p.b.rules[rows[k].id]
				}
			}
		}
	}
	for _, st := range l.stubs {
		if addr >= st.Start && addr < st.End && st.Rule.CFA != CFANone {
			return st.Rule
		}
	}
	return Rule{}
}

// parse parses FDE i and returns its index in the builder's FDEs, or -1
// when it is malformed or empty.
func (l *lazyIndex) parse(i int) int32 {
	p := l.p
	off := l.off(i)
	if off < 0 {
		p.b.skipped++
		return -1
	}
	_, end, isCIE, id, idOff, body, err := p.header(off)
	if err != nil || isCIE || end <= off+4 {
		p.b.skipped++
		return -1
	}
	nf := len(p.b.fdes)
	cp := p.ciePos(id, idOff)
	if cp < 0 || p.fde(idOff, body, end, cp) != nil || len(p.b.fdes) == nf {
		p.b.skipped++
		return -1
	}
	return int32(nf)
}

// bytes is the memory a lazy table holds: the unwind section, its index,
// and the rows and rules parsed so far.
func (l *lazyIndex) bytes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.p.b
	return l.size + cap(b.rows)*int(unsafe.Sizeof(row{})) + cap(b.fdes)*int(unsafe.Sizeof(fdeRows{})) + cap(b.rules)*int(unsafe.Sizeof(Rule{})) + len(l.parsed)*16
}

// counts reports how many FDEs a lazy table has parsed and how many its
// index lists.
func (l *lazyIndex) counts() (parsed, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.p.b.fdes), l.n()
}
