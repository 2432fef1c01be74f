package arch

import (
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"math"
	"sort"
	"unsafe"
)

// This file parses DWARF call frame information (DWARF 5 §6.4, and the
// .eh_frame dialect of the LSB) into a Table. It is our own parser rather
// than delve's pkg/dwarf/frame because that package keeps every FDE and
// re-runs its instructions on each lookup, allocating as it goes; an
// unwinder that runs per sample wants the instructions executed once, at
// load, into a flat sorted array of small rules.

// Table is the unwind table of one module: sorted row start addresses
// (link-time virtual addresses, before any load bias) each with the Rule
// that holds from it up to the next row. A row takes 8 bytes (its start as
// a 32-bit offset from the table's base, and a rule index); distinct rules
// are stored once. A Table is immutable once built and safe for
// concurrent use.
type Table struct {
	Arch   Arch
	base   uint64
	starts []uint32 // row start - base
	ids    []uint32
	rules  []Rule
	// FDEs counts the frame description entries that produced rows;
	// Skipped counts entries not used (unknown augmentation, unsupported
	// encodings, overlaps, an FDE whose instructions were malformed).
	// Both are 0 in a lazy table (see [Table.Lazy]).
	FDEs, Skipped int

	lazy *lazyIndex // NewLazyTableELF: rows parsed on demand, under a lock
	gort *goRuntime // a Go binary's frame pointers and stack switches
}

// Lazy reports whether t parses its FDEs on demand (NewLazyTableELF), and
// how many of the FDEs its search table lists it has parsed so far.
func (t *Table) Lazy() (lazy bool, parsed, total int) {
	if t.lazy == nil {
		return false, 0, 0
	}
	parsed, total = t.lazy.counts()
	return true, parsed, total
}

// Lookup returns the rule covering the link-time address addr, or a Rule
// with CFA == CFANone if no row covers it.
func (t *Table) Lookup(addr uint64) Rule {
	var r Rule
	if t.lazy != nil {
		r = t.lazy.lookup(addr)
	} else if i := t.find(addr); i >= 0 {
		r = t.rules[t.ids[i]]
	}
	if t.gort != nil {
		r = t.gort.adjust(t.Arch, addr, r)
	}
	return r
}

// find returns the index of the row covering addr, or -1.
func (t *Table) find(addr uint64) int {
	if addr < t.base {
		return -1
	}
	a := uint32(min(addr-t.base, math.MaxUint32)) // past the last row (an end) if over
	s := t.starts
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m] <= a {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// Len is the number of rows; 0 for a lazy table, which has no rows
// merged into one sorted array.
func (t *Table) Len() int { return len(t.starts) }

// Row returns row i's start address and rule (i < Len()).
func (t *Table) Row(i int) (uint64, Rule) { return t.base + uint64(t.starts[i]), t.rules[t.ids[i]] }

// Bytes is the memory the table's rows and rules take; for a lazy table,
// the rows parsed so far and the unwind sections it keeps.
func (t *Table) Bytes() int {
	if t.lazy != nil {
		return t.lazy.bytes()
	}
	return 4*len(t.starts) + 4*len(t.ids) + int(unsafe.Sizeof(Rule{}))*len(t.rules)
}

// NumRules is the number of distinct rules.
func (t *Table) NumRules() int { return len(t.rules) }

// Sections is the raw unwind data of one module, for NewTable.
type Sections struct {
	File string // named in errors
	Arch Arch
	// EHFrame is the .eh_frame section's bytes and EHFrameAddr its
	// link-time virtual address (pc-relative pointers need it).
	EHFrame     []byte
	EHFrameAddr uint64
	// EHFrameHdrAddr is .eh_frame_hdr's address, the base of datarel
	// pointers; 0 if unknown.
	EHFrameHdrAddr uint64
	// EHFrameHdr is .eh_frame_hdr's bytes, optional: NewLazyTable finds
	// FDEs through its search table (else it scans .eh_frame once).
	EHFrameHdr []byte
	// DebugFrame is the .debug_frame section, used where .eh_frame has no
	// entry for an address.
	DebugFrame []byte
	// Stubs are rules for code without CFI whose frame shape is known
	// (PLT stubs: aarch64 linkers emit no CFI for .plt), used only where
	// no FDE covers an address. NewTableELF fills them in.
	Stubs []Stub
}

// Stub is a rule for the addresses [Start, End).
type Stub struct {
	Start, End uint64
	Rule       Rule
}

// maxSection caps the size of an unwind section this package reads.
const maxSection = 256 << 20

// maxRememberDepth caps DW_CFA_remember_state nesting.
const maxRememberDepth = 64

// NewTable parses s.EHFrame and s.DebugFrame. On malformed data it returns
// the table of every entry it could parse together with a *FormatError
// naming the first bad entry, so a caller may still use the table.
func NewTable(s Sections) (*Table, error) {
	if s.Arch != AMD64 && s.Arch != ARM64 {
		return nil, fmt.Errorf("arch: %s: unsupported architecture %v", s.File, s.Arch)
	}
	// About one row per 8 bytes of CFI: sizing rows up front saves the
	// copies of growing them, most of a table build's time.
	b := &builder{arch: s.Arch, ruleIDs: map[Rule]uint32{}, rows: make([]row, 0, (len(s.EHFrame)+len(s.DebugFrame))/8)}
	var errs []error
	if len(s.EHFrame) > 0 {
		if err := b.parse(s.File, ".eh_frame", s.EHFrame, s.EHFrameAddr, s.EHFrameHdrAddr, true); err != nil {
			errs = append(errs, err)
		}
	}
	if len(s.DebugFrame) > 0 {
		if err := b.parse(s.File, ".debug_frame", s.DebugFrame, 0, 0, false); err != nil {
			errs = append(errs, err)
		}
	}
	b.addStubs(s.Stubs)
	t := b.finish()
	if len(errs) > 0 {
		return t, errs[0]
	}
	return t, nil
}

// addStubs adds the parts of each stub no FDE covers.
func (b *builder) addStubs(stubs []Stub) {
	if len(stubs) == 0 {
		return
	}
	covered := append([]fdeRows(nil), b.fdes...)
	sort.Slice(covered, func(i, j int) bool { return covered[i].start < covered[j].start })
	for _, st := range stubs {
		if st.Rule.CFA == CFANone || st.End <= st.Start {
			continue
		}
		id := b.ruleID(st.Rule)
		add := func(lo, hi uint64) {
			if lo < hi {
				b.fdes = append(b.fdes, fdeRows{start: lo, end: hi, from: len(b.rows), to: len(b.rows) + 1})
				b.rows = append(b.rows, row{loc: lo, id: id})
			}
		}
		lo := st.Start
		for _, f := range covered {
			if f.end <= lo || f.start >= st.End {
				continue
			}
			add(lo, min(f.start, st.End))
			lo = max(lo, f.end)
		}
		add(lo, st.End)
	}
}

// ErrNoUnwindInfo says a module has neither .eh_frame nor .debug_frame.
var ErrNoUnwindInfo = errors.New("arch: no .eh_frame or .debug_frame")

// elfArch is the Arch of an ELF file's machine.
func elfArch(f *elf.File, path string) (Arch, error) {
	switch f.Machine {
	case elf.EM_X86_64:
		return AMD64, nil
	case elf.EM_AARCH64:
		return ARM64, nil
	}
	return 0, fmt.Errorf("arch: %s: unsupported machine %v", path, f.Machine)
}

// NewTableELF reads the unwind sections of an ELF file. Without section
// headers it finds .eh_frame through the PT_GNU_EH_FRAME segment. path only
// names the file in errors.
func NewTableELF(f *elf.File, path string) (*Table, error) {
	return newTableELF(f, path, nil)
}

// newTableELF is NewTableELF; file, if not nil, is f mapped in memory,
// where a Go binary's pclntab is read in place (goRuntimeELF).
func newTableELF(f *elf.File, path string, file []byte) (*Table, error) {
	s := Sections{File: path}
	a, err := elfArch(f, path)
	if err != nil {
		return nil, err
	}
	s.Arch = a
	read := func(name string) ([]byte, uint64, error) {
		sec := f.Section(name)
		if sec == nil || sec.Type == elf.SHT_NOBITS {
			return nil, 0, nil
		}
		if sec.Size > maxSection {
			return nil, 0, fmt.Errorf("arch: %s: %s is %d bytes, over the %d cap", path, name, sec.Size, maxSection)
		}
		d, err := sec.Data()
		if err != nil {
			return nil, 0, fmt.Errorf("arch: %s: reading %s: %w", path, name, err)
		}
		if len(d) > maxSection {
			return nil, 0, fmt.Errorf("arch: %s: %s is %d bytes uncompressed, over the %d cap", path, name, len(d), maxSection)
		}
		return d, sec.Addr, nil
	}
	if s.EHFrame, s.EHFrameAddr, err = read(".eh_frame"); err != nil {
		return nil, err
	}
	if s.DebugFrame, _, err = read(".debug_frame"); err != nil {
		return nil, err
	}
	if h := f.Section(".eh_frame_hdr"); h != nil {
		s.EHFrameHdrAddr = h.Addr
	}
	if s.EHFrame == nil {
		if s.EHFrame, s.EHFrameAddr, s.EHFrameHdrAddr, err = ehFrameFromSegments(f, path); err != nil {
			return nil, err
		}
	}
	g := goRuntimeELF(f, a, file)
	if len(s.EHFrame) == 0 && len(s.DebugFrame) == 0 && g == nil {
		return nil, fmt.Errorf("%w in %s", ErrNoUnwindInfo, path)
	}
	s.Stubs = pltStubs(f, s.Arch)
	t, err := NewTable(s)
	if t != nil {
		t.gort = g
	}
	return t, err
}

// OpenTable opens the ELF file at path and returns its unwind table.
func OpenTable(path string) (*Table, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("arch: %w", err)
	}
	defer f.Close()
	return NewTableELF(f, path)
}

type row struct {
	loc uint64
	id  uint32
}

type fdeRows struct {
	start, end uint64
	from, to   int // rows[from:to]
}

type builder struct {
	arch    Arch
	rows    []row
	fdes    []fdeRows
	rules   []Rule
	ruleIDs map[Rule]uint32
	skipped int
}

func (b *builder) ruleID(r Rule) uint32 {
	if id, ok := b.ruleIDs[r]; ok {
		return id
	}
	id := uint32(len(b.rules))
	b.rules = append(b.rules, r)
	b.ruleIDs[r] = id
	return id
}

// finish merges the FDEs' rows into one sorted table, with CFANone rows in
// the gaps between FDEs.
func (b *builder) finish() *Table {
	t := &Table{Arch: b.arch, Skipped: b.skipped}
	none := b.ruleID(Rule{})
	sort.SliceStable(b.fdes, func(i, j int) bool { return b.fdes[i].start < b.fdes[j].start })
	starts := make([]uint64, 0, len(b.rows)+len(b.fdes)+1)
	t.ids = make([]uint32, 0, cap(starts))
	add := func(loc uint64, id uint32) {
		if n := len(starts); n > 0 {
			if starts[n-1] == loc {
				t.ids[n-1] = id
				if n > 1 && t.ids[n-2] == id {
					starts, t.ids = starts[:n-1], t.ids[:n-1]
				}
				return
			}
			if t.ids[n-1] == id {
				return
			}
		}
		starts = append(starts, loc)
		t.ids = append(t.ids, id)
	}
	var end uint64
	have := false
	for _, f := range b.fdes {
		if have && f.start < end {
			t.Skipped++ // overlaps the previous FDE: keep the first
			continue
		}
		if base := cmp.Or(t.base, f.start); !have && f.end-f.start > math.MaxUint32 || have && f.end-base > math.MaxUint32 {
			t.Skipped++ // rows are 32-bit offsets: no module spans 4 GiB
			continue
		}
		if !have {
			t.base = f.start
		}
		if have && f.start > end {
			add(end, none)
		}
		for _, r := range b.rows[f.from:f.to] {
			add(r.loc, r.id)
		}
		end, have = f.end, true
		t.FDEs++
	}
	if have {
		add(end, none)
	}
	// Remap rule ids to only the rules in use, dropping dead ones from
	// overlapping FDEs.
	remap := make([]int32, len(b.rules))
	for i := range remap {
		remap[i] = -1
	}
	for i, id := range t.ids {
		if remap[id] < 0 {
			remap[id] = int32(len(t.rules))
			t.rules = append(t.rules, b.rules[id])
		}
		t.ids[i] = uint32(remap[id])
	}
	t.starts = make([]uint32, len(starts))
	for i, s := range starts {
		t.starts[i] = uint32(s - t.base)
	}
	t.ids = t.ids[:len(t.ids):len(t.ids)]
	return t
}

type cie struct {
	caf     uint64
	daf     int64
	raReg   uint64
	fdeEnc  byte
	ptrSize int
	hasZ    bool
	signal  bool
	initial []byte
	init    cfiState // state after the initial instructions
	ok      bool     // usable
	err     *FormatError
}

type sectionParser struct {
	b        *builder
	file     string
	sect     string
	data     []byte
	secAddr  uint64
	dataAddr uint64
	eh       bool
	cies     map[int]*cie
	x        interp
}

func (b *builder) parse(file, sect string, data []byte, secAddr, dataAddr uint64, eh bool) error {
	if len(data) > maxSection {
		return &FormatError{File: file, Section: sect, Msg: fmt.Sprintf("section of %d bytes over the %d cap", len(data), maxSection)}
	}
	p := &sectionParser{b: b, file: file, sect: sect, data: data, secAddr: secAddr, dataAddr: dataAddr, eh: eh, cies: map[int]*cie{}}
	var first error
	off := 0
	for off < len(data) {
		start, end, isCIE, id, idOff, body, err := p.header(off)
		if err != nil {
			if first == nil {
				first = err
			}
			break // the length is bad: nothing after it can be found
		}
		if end == start+4 && eh {
			break // zero terminator
		}
		if !isCIE {
			var ciePos int
			if eh {
				ciePos = idOff - int(id)
				if id > uint64(idOff) {
					ciePos = -1
				}
			} else {
				ciePos = int(id)
				if id > uint64(len(data)) {
					ciePos = -1
				}
			}
			if err := p.fde(idOff, body, end, ciePos); err != nil {
				b.skipped++
				if first == nil {
					first = err
				}
			}
		}
		off = end
	}
	return first
}

// header reads an entry's length and id at off. end is the offset just
// past the entry; idOff the offset of its CIE id / CIE pointer field.
func (p *sectionParser) header(off int) (start, end int, isCIE bool, id uint64, idOff, body int, err error) {
	r := &reader{data: p.data, off: off, file: p.file, sect: p.sect}
	length := uint64(r.u32())
	offSize := 4
	if length == 0xffffffff {
		length = r.u64()
		offSize = 8
	}
	if r.err != nil {
		return 0, 0, false, 0, 0, 0, r.err
	}
	if length == 0 {
		return off, r.off, false, 0, 0, 0, nil
	}
	if length > uint64(len(p.data)-r.off) {
		return 0, 0, false, 0, 0, 0, &FormatError{File: p.file, Section: p.sect, Off: int64(off), Msg: fmt.Sprintf("entry length %#x runs past the section end", length)}
	}
	end = r.off + int(length)
	idOff = r.off
	if offSize == 4 {
		id = uint64(r.u32())
	} else {
		id = r.u64()
	}
	if r.err != nil || r.off > end {
		return 0, 0, false, 0, 0, 0, &FormatError{File: p.file, Section: p.sect, Off: int64(off), Msg: "entry too short for its id"}
	}
	if p.eh {
		isCIE = id == 0
	} else {
		isCIE = id == 0xffffffff || id == 0xffffffffffffffff
	}
	return off, end, isCIE, id, idOff, r.off, nil
}

// cie parses (once) the CIE at off.
func (p *sectionParser) cie(off int) *cie {
	if c, ok := p.cies[off]; ok {
		return c
	}
	c := &cie{}
	p.cies[off] = c
	_, end, isCIE, _, _, body, err := p.header(off)
	if err != nil {
		c.err = err.(*FormatError)
		return c
	}
	if !isCIE {
		c.err = &FormatError{File: p.file, Section: p.sect, Off: int64(off), Msg: "CIE pointer does not point at a CIE"}
		return c
	}
	r := &reader{data: p.data[:end], off: body, file: p.file, sect: p.sect}
	version := r.u8()
	aug := r.cstring()
	c.ptrSize = 8
	if version >= 4 {
		c.ptrSize = int(r.u8())
		r.u8() // segment selector size
	}
	c.caf = r.uleb()
	c.daf = r.sleb()
	if version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	if r.err != nil {
		c.err = r.err
		return c
	}
	if version != 1 && version != 3 && version != 4 {
		c.err = &FormatError{File: p.file, Section: p.sect, Off: int64(off), Msg: fmt.Sprintf("CIE version %d", version)}
		return c
	}
	if c.ptrSize != 4 && c.ptrSize != 8 {
		c.err = &FormatError{File: p.file, Section: p.sect, Off: int64(off), Msg: fmt.Sprintf("CIE address size %d", c.ptrSize)}
		return c
	}
	if len(aug) > 0 && aug[0] == 'z' {
		c.hasZ = true
		n := r.uleb()
		if n > uint64(end-r.off) {
			c.err = &FormatError{File: p.file, Section: p.sect, Off: int64(r.off), Msg: "augmentation data runs past the CIE"}
			return c
		}
		ar := &reader{data: r.bytes(int(n)), file: p.file, sect: p.sect}
		augStart := r.off - int(n)
	letters:
		for _, l := range aug[1:] {
			switch l {
			case 'L':
				ar.u8()
			case 'R':
				c.fdeEnc = ar.u8()
			case 'P':
				enc := ar.u8()
				ar.encoded(enc&^peIndirect, c.ptrSize, p.secAddr+uint64(augStart), p.dataAddr)
			case 'S':
				c.signal = true
			case 'B', 'G':
			default:
				break letters // the rest of the data is skipped by its length
			}
		}
		if ar.err != nil {
			ar.err.Off += int64(augStart)
			c.err = ar.err
			return c
		}
	} else if aug != "" {
		c.err = &FormatError{File: p.file, Section: p.sect, Off: int64(off), Msg: fmt.Sprintf("unsupported CIE augmentation %q", aug)}
		return c
	}
	if !p.eh {
		c.fdeEnc = peAbsptr
	}
	c.initial = p.data[r.off:end]
	c.init = initialState(p.b.arch)
	c.init.signal = c.signal
	x := &p.x // reused: its remember-state stack is 2 KB
	x.init(p, c, 0, ^uint64(0), r.off)
	x.state = c.init
	if err := x.run(c.initial, false); err != nil {
		c.err = err
		return c
	}
	c.init = x.state
	c.ok = true
	return c
}

func initialState(a Arch) cfiState {
	return cfiState{cfa: CFAUnsupported}
}

// fde parses the FDE whose id field is at idOff and executes its
// instructions into rows.
func (p *sectionParser) fde(idOff, body, end, ciePos int) error {
	if ciePos < 0 || ciePos >= len(p.data) {
		return &FormatError{File: p.file, Section: p.sect, Off: int64(idOff), Msg: "CIE pointer outside the section"}
	}
	c := p.cie(ciePos)
	if !c.ok {
		return c.err
	}
	r := &reader{data: p.data[:end], off: body, file: p.file, sect: p.sect}
	var begin, size uint64
	if p.eh {
		begin = r.encoded(c.fdeEnc, c.ptrSize, p.secAddr, p.dataAddr)
		size = r.encoded(c.fdeEnc&0x0f, c.ptrSize, 0, 0)
	} else {
		begin = r.encoded(peAbsptr, c.ptrSize, 0, 0)
		size = r.encoded(peAbsptr, c.ptrSize, 0, 0)
	}
	if c.hasZ {
		n := r.uleb()
		r.bytes(int(min(n, uint64(end))))
	}
	if r.err != nil {
		return r.err
	}
	if size == 0 || begin == 0 || begin+size < begin {
		p.b.skipped++ // empty, discarded (address 0) or wrapping
		return nil
	}
	from := len(p.b.rows)
	x := &p.x // reused: its remember-state stack is 2 KB
	x.init(p, c, begin, begin+size, r.off)
	x.state = c.init
	if err := x.run(p.data[r.off:end], true); err != nil {
		p.b.rows = p.b.rows[:from]
		return err
	}
	x.emit()
	p.b.fdes = append(p.b.fdes, fdeRows{start: begin, end: begin + size, from: from, to: len(p.b.rows)})
	return nil
}

// cfiState is the row being built: the CFA rule and the rules of the two
// registers a stack walk restores.
type cfiState struct {
	cfa     CFAKind
	cfaReg  uint64
	cfaOff  int64
	plt     [3]uint8
	ra, fp  regState
	saved   [MaxSaved]regState // the arch's other callee-saved registers
	signed  bool
	signal  bool // the CIE has augmentation 'S'
	argSize uint64
}

type regState struct {
	kind RegKind
	off  int64
}

// rule reduces s to a Rule, marking what does not fit as unsupported.
func (s *cfiState) rule() Rule {
	r := Rule{CFA: s.cfa, RASigned: s.signed, Signal: s.signal}
	if s.cfa == CFAReg || s.cfa == CFADeref || s.cfa == CFAPLT {
		if s.cfaReg >= NumRegs || s.cfaOff != int64(int32(s.cfaOff)) {
			r.CFA = CFAUnsupported
		} else {
			r.CFAReg = uint8(s.cfaReg)
			r.CFAOff = int32(s.cfaOff)
			r.PLTMask, r.PLTGE, r.PLTShift = s.plt[0], s.plt[1], s.plt[2]
		}
	}
	conv := func(g regState) (RegKind, int32) {
		switch g.kind {
		case RegOffset, RegValOffset, RegAtFP, RegAtSP:
			if g.off != int64(int32(g.off)) {
				return RegUnsupported, 0
			}
			return g.kind, int32(g.off)
		}
		return g.kind, 0
	}
	r.RA, r.RAOff = conv(s.ra)
	r.FP, r.FPOff = conv(s.fp)
	// Saved slots are all CFA-relative or, in signal frames, all
	// sp-relative; a register saved the other way counts as lost.
	want := RegOffset
	for _, g := range s.saved {
		if g.kind == RegAtSP {
			want, r.SavedAtSP = RegAtSP, true
			break
		}
	}
	for i, g := range s.saved {
		switch {
		case g.kind == RegSame:
		case g.kind == want && g.off%8 == 0 && g.off/8 >= -127 && g.off/8 <= 127 && g.off != 0:
			r.Saved[i] = int8(g.off / 8)
		default:
			r.Saved[i] = SavedLost
		}
		if r.Saved[i] != 0 {
			r.SavedSet |= 1 << uint(i)
		}
	}
	return r
}

// interp runs call frame instructions for one FDE (or a CIE's initial
// instructions).
type interp struct {
	p          *sectionParser
	c          *cie
	loc, end   uint64
	base       int // section offset of the instructions, for errors
	from       int // first row of this FDE in builder.rows
	state      cfiState
	stack      []cfiState
	stackStore [8]cfiState
}

func (x *interp) init(p *sectionParser, c *cie, begin, end uint64, base int) {
	x.p, x.c, x.loc, x.end, x.base = p, c, begin, end, base
	if x.stack == nil {
		x.stack = x.stackStore[:0]
	}
	x.stack = x.stack[:0]
	x.from = len(p.b.rows)
}

func (x *interp) emit() {
	b := x.p.b
	id := b.ruleID(x.state.rule())
	if n := len(b.rows); n > x.from && b.rows[n-1].loc == x.loc {
		b.rows[n-1].id = id
		return
	}
	b.rows = append(b.rows, row{loc: x.loc, id: id})
}

// advance moves to loc+delta, first emitting the row that held until now.
// It reports false once past the FDE's end.
func (x *interp) advance(to uint64, rows bool) bool {
	if to < x.loc {
		return false // going backwards is malformed; stop here
	}
	if rows && to > x.loc {
		x.emit()
	}
	x.loc = to
	return to < x.end
}

func (x *interp) errAt(r *reader, op int, format string, args ...any) *FormatError {
	return &FormatError{File: x.p.file, Section: x.p.sect, Off: int64(x.base + op), Msg: fmt.Sprintf(format, args...)}
}

// DWARF call frame instruction opcodes (DWARF 5 §7.24).
const (
	cfaAdvanceLoc        = 0x40
	cfaOffset            = 0x80
	cfaRestore           = 0xc0
	cfaNop               = 0x00
	cfaSetLoc            = 0x01
	cfaAdvanceLoc1       = 0x02
	cfaAdvanceLoc2       = 0x03
	cfaAdvanceLoc4       = 0x04
	cfaOffsetExtended    = 0x05
	cfaRestoreExtended   = 0x06
	cfaUndefined         = 0x07
	cfaSameValue         = 0x08
	cfaRegister          = 0x09
	cfaRememberState     = 0x0a
	cfaRestoreState      = 0x0b
	cfaDefCFA            = 0x0c
	cfaDefCFARegister    = 0x0d
	cfaDefCFAOffset      = 0x0e
	cfaDefCFAExpression  = 0x0f
	cfaExpression        = 0x10
	cfaOffsetExtendedSF  = 0x11
	cfaDefCFASF          = 0x12
	cfaDefCFAOffsetSF    = 0x13
	cfaValOffset         = 0x14
	cfaValOffsetSF       = 0x15
	cfaValExpression     = 0x16
	cfaGNUWindowSave     = 0x2d // DW_CFA_AARCH64_negate_ra_state on arm64
	cfaGNUArgsSize       = 0x2e
	cfaGNUNegOffsetExtSF = 0x2f
)

// reg returns the state of register n if a stack walk tracks it.
func (x *interp) reg(n uint64) *regState {
	switch {
	case n == x.c.raReg:
		return &x.state.ra
	case n == uint64(x.p.b.arch.FP()):
		return &x.state.fp
	}
	if i := savedSlot(x.p.b.arch, n); i >= 0 {
		return &x.state.saved[i]
	}
	return nil
}

func (x *interp) initialReg(n uint64) regState {
	switch {
	case n == x.c.raReg:
		return x.c.init.ra
	case n == uint64(x.p.b.arch.FP()):
		return x.c.init.fp
	}
	if i := savedSlot(x.p.b.arch, n); i >= 0 {
		return x.c.init.saved[i]
	}
	return regState{}
}

// run executes prog. rows says whether to emit rows (an FDE) or only build
// state (a CIE's initial instructions).
func (x *interp) run(prog []byte, rows bool) *FormatError {
	r := &reader{data: prog, file: x.p.file, sect: x.p.sect}
	c := x.c
	for r.off < len(prog) {
		op := r.off
		b := r.u8()
		switch b & 0xc0 {
		case cfaAdvanceLoc:
			if !x.advance(x.loc+uint64(b&0x3f)*c.caf, rows) {
				return nil
			}
			continue
		case cfaOffset:
			off := int64(r.uleb()) * c.daf
			if g := x.reg(uint64(b & 0x3f)); g != nil {
				*g = regState{kind: RegOffset, off: off}
			}
			continue
		case cfaRestore:
			if g := x.reg(uint64(b & 0x3f)); g != nil {
				*g = x.initialReg(uint64(b & 0x3f))
			}
			continue
		}
		switch b {
		case cfaNop:
		case cfaSetLoc:
			to := r.encoded(c.fdeEnc, c.ptrSize, x.p.secAddr+uint64(x.base), x.p.dataAddr)
			if r.err == nil && !x.advance(to, rows) {
				return nil
			}
		case cfaAdvanceLoc1:
			d := uint64(r.u8())
			if r.err == nil && !x.advance(x.loc+d*c.caf, rows) {
				return nil
			}
		case cfaAdvanceLoc2:
			d := uint64(r.u16())
			if r.err == nil && !x.advance(x.loc+d*c.caf, rows) {
				return nil
			}
		case cfaAdvanceLoc4:
			d := uint64(r.u32())
			if r.err == nil && !x.advance(x.loc+d*c.caf, rows) {
				return nil
			}
		case cfaOffsetExtended:
			n, off := r.uleb(), int64(r.uleb())*c.daf
			if g := x.reg(n); g != nil {
				*g = regState{kind: RegOffset, off: off}
			}
		case cfaOffsetExtendedSF:
			n, off := r.uleb(), r.sleb()*c.daf
			if g := x.reg(n); g != nil {
				*g = regState{kind: RegOffset, off: off}
			}
		case cfaGNUNegOffsetExtSF:
			n, off := r.uleb(), -int64(r.uleb())*c.daf
			if g := x.reg(n); g != nil {
				*g = regState{kind: RegOffset, off: off}
			}
		case cfaValOffset:
			n, off := r.uleb(), int64(r.uleb())*c.daf
			if g := x.reg(n); g != nil {
				*g = regState{kind: RegValOffset, off: off}
			}
		case cfaValOffsetSF:
			n, off := r.uleb(), r.sleb()*c.daf
			if g := x.reg(n); g != nil {
				*g = regState{kind: RegValOffset, off: off}
			}
		case cfaRestoreExtended:
			n := r.uleb()
			if g := x.reg(n); g != nil {
				*g = x.initialReg(n)
			}
		case cfaUndefined:
			if g := x.reg(r.uleb()); g != nil {
				*g = regState{kind: RegUndefined}
			}
		case cfaSameValue:
			if g := x.reg(r.uleb()); g != nil {
				*g = regState{kind: RegSame}
			}
		case cfaRegister:
			n := r.uleb()
			m := r.uleb()
			if g := x.reg(n); g != nil {
				if n == m {
					*g = regState{kind: RegSame}
				} else {
					*g = regState{kind: RegUnsupported}
				}
			}
		case cfaRememberState:
			if len(x.stack) >= maxRememberDepth {
				return x.errAt(r, op, "DW_CFA_remember_state nested over %d deep", maxRememberDepth)
			}
			x.stack = append(x.stack, x.state)
		case cfaRestoreState:
			if len(x.stack) == 0 {
				return x.errAt(r, op, "DW_CFA_restore_state with no remembered state")
			}
			// The CFA rule is part of the remembered state (DWARF 5 §6.4.2.4).
			x.state = x.stack[len(x.stack)-1]
			x.stack = x.stack[:len(x.stack)-1]
		case cfaDefCFA:
			x.state.cfaReg = r.uleb()
			x.state.cfaOff = int64(r.uleb())
			x.state.cfa = CFAReg
		case cfaDefCFASF:
			x.state.cfaReg = r.uleb()
			x.state.cfaOff = r.sleb() * c.daf
			x.state.cfa = CFAReg
		case cfaDefCFARegister:
			x.state.cfaReg = r.uleb()
			if x.state.cfa != CFAReg {
				x.state.cfa = CFAReg
			}
		case cfaDefCFAOffset:
			x.state.cfaOff = int64(r.uleb())
		case cfaDefCFAOffsetSF:
			x.state.cfaOff = r.sleb() * c.daf
		case cfaDefCFAExpression:
			n := r.uleb()
			e := r.bytes(int(min(n, uint64(len(prog)))))
			if r.err == nil {
				x.cfaExpr(e)
			}
		case cfaExpression:
			reg := r.uleb()
			n := r.uleb()
			e := r.bytes(int(min(n, uint64(len(prog)))))
			if g := x.reg(reg); g != nil && r.err == nil {
				*g = x.regExpr(e)
			}
		case cfaValExpression:
			reg := r.uleb()
			n := r.uleb()
			r.bytes(int(min(n, uint64(len(prog)))))
			if g := x.reg(reg); g != nil {
				*g = regState{kind: RegUnsupported}
			}
		case cfaGNUWindowSave:
			if x.p.b.arch != ARM64 {
				return x.errAt(r, op, "DW_CFA_GNU_window_save on %v", x.p.b.arch)
			}
			x.state.signed = !x.state.signed
		case cfaGNUArgsSize:
			x.state.argSize = r.uleb()
		default:
			return x.errAt(r, op, "unknown call frame instruction %#x", b)
		}
		if r.err != nil {
			r.err.Off += int64(x.base)
			return r.err
		}
	}
	return nil
}

// DWARF expression opcodes the recognizers below accept.
const (
	opDeref = 0x06
	opAnd   = 0x1a
	opShl   = 0x24
	opPlus  = 0x22
	opGe    = 0x2a
	opLit0  = 0x30
	opBreg0 = 0x70
)

// cfaExpr recognizes the CFA expressions compilers emit for code the
// table can describe: "bregN off; deref" (stack realignment), "bregN off"
// and the x86-64 PLT expression. Anything else is CFAUnsupported.
func (x *interp) cfaExpr(e []byte) {
	r := &reader{data: e}
	x.state.cfa = CFAUnsupported
	b := r.u8()
	if b < opBreg0 || b >= opBreg0+32 {
		return
	}
	reg := uint64(b - opBreg0)
	off := r.sleb()
	if r.err != nil {
		return
	}
	rest := e[r.off:]
	switch {
	case len(rest) == 0:
		x.state.cfa, x.state.cfaReg, x.state.cfaOff = CFAReg, reg, off
	case len(rest) == 1 && rest[0] == opDeref:
		x.state.cfa, x.state.cfaReg, x.state.cfaOff = CFADeref, reg, off
	case x.p.b.arch == AMD64 && reg == AMD64RSP && len(rest) == 9 &&
		rest[0] == opBreg0+AMD64RIP && rest[1] == 0 &&
		isLit(rest[2]) && rest[3] == opAnd && isLit(rest[4]) && rest[5] == opGe &&
		isLit(rest[6]) && rest[7] == opShl && rest[8] == opPlus:
		// rsp + off + (((rip & A) >= B) << C)
		x.state.cfa, x.state.cfaReg, x.state.cfaOff = CFAPLT, reg, off
		x.state.plt = [3]uint8{rest[2] - opLit0, rest[4] - opLit0, rest[6] - opLit0}
	}
}

func isLit(b byte) bool { return b >= opLit0 && b < opLit0+32 }

// regExpr recognizes "breg(fp) off" and "breg(sp) off": the register is
// saved at fp+off (stack realignment) or sp+off (signal frames, whose
// sigcontext sits at the stack pointer).
func (x *interp) regExpr(e []byte) regState {
	r := &reader{data: e}
	b := r.u8()
	off := r.sleb()
	if r.err != nil || r.off != len(e) {
		return regState{kind: RegUnsupported}
	}
	switch int(b) {
	case opBreg0 + x.p.b.arch.FP():
		return regState{kind: RegAtFP, off: off}
	case opBreg0 + x.p.b.arch.SP():
		return regState{kind: RegAtSP, off: off}
	}
	return regState{kind: RegUnsupported}
}
