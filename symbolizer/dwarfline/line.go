// Package dwarfline decodes DWARF 2–5 line-number programs (.debug_line)
// into sorted row tables and answers "which file:line:column is this
// address" the way llvm-symbolizer does.
//
// It exists beside debug/dwarf because debug/dwarf's LineReader cleans the
// file paths it returns (path.Join), while symbolizers print the directory
// and file names exactly as recorded ("/usr/lib/gcc/../../include/x.h"),
// and because a lookup table built once and searched by bisection is much
// faster than replaying the program per address.
package dwarfline

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Limits on sizes read from the file.
const (
	maxEntries    = 1 << 20 // directories or files in one header
	maxFormats    = 64      // entry format descriptors in a v5 header
	maxOpcodeBase = 255
)

// FormatError reports malformed line-table bytes at an offset of .debug_line.
type FormatError struct {
	Offset uint64
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("dwarfline: .debug_line offset %#x: %s", e.Offset, e.Msg)
}

// Sections carries the string sections forms in a v5 header refer to.
type Sections struct {
	Line    []byte // .debug_line
	LineStr []byte // .debug_line_str
	Str     []byte // .debug_str
}

// Row is one row of the line matrix. Column and File are 16 bits wide, as
// in LLVM's line matrix, so large values print the same way.
type Row struct {
	Addr   uint64
	Line   uint32
	Column uint16
	File   uint16
	End    bool // end_sequence
}

// Seq is one instruction sequence: rows [First, Last) of Table.Rows,
// covering addresses [Low, High).
type Seq struct {
	Low, High   uint64
	First, Last int
}

// FileEntry is one entry of the file-name table, unjoined.
type FileEntry struct {
	Name string
	Dir  uint64
}

// Table is a decoded line table of one compile unit.
type Table struct {
	Offset  uint64 // offset of the table in .debug_line
	Version uint16
	Dirs    []string
	Files   []FileEntry
	Rows    []Row
	Seqs    []Seq // sorted by Low
}

type buf struct {
	data []byte
	off  int
	base uint64 // offset of data[0] in the section, for errors
	err  error
	le   binary.ByteOrder
}

func (b *buf) fail(msg string) {
	if b.err == nil {
		b.err = &FormatError{Offset: b.base + uint64(b.off), Msg: msg}
	}
	b.off = len(b.data)
}

func (b *buf) u8() uint8 {
	if b.off >= len(b.data) {
		b.fail("unexpected end of data")
		return 0
	}
	v := b.data[b.off]
	b.off++
	return v
}

func (b *buf) bytes(n uint64) []byte {
	if n > uint64(len(b.data)-b.off) {
		b.fail("unexpected end of data")
		return nil
	}
	v := b.data[b.off : b.off+int(n)]
	b.off += int(n)
	return v
}

func (b *buf) u16() uint16 {
	p := b.bytes(2)
	if p == nil {
		return 0
	}
	return b.le.Uint16(p)
}

func (b *buf) u32() uint32 {
	p := b.bytes(4)
	if p == nil {
		return 0
	}
	return b.le.Uint32(p)
}

func (b *buf) u64() uint64 {
	p := b.bytes(8)
	if p == nil {
		return 0
	}
	return b.le.Uint64(p)
}

func (b *buf) uint(size int) uint64 {
	switch size {
	case 1:
		return uint64(b.u8())
	case 2:
		return uint64(b.u16())
	case 4:
		return uint64(b.u32())
	case 8:
		return b.u64()
	}
	b.fail(fmt.Sprintf("unsupported integer size %d", size))
	return 0
}

func (b *buf) uleb() uint64 {
	var v uint64
	var shift uint
	for {
		c := b.u8()
		if b.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			return v
		}
	}
}

func (b *buf) sleb() int64 {
	var v int64
	var shift uint
	var c byte
	for {
		c = b.u8()
		if b.err != nil {
			return 0
		}
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			break
		}
	}
	if shift < 64 && c&0x40 != 0 {
		v |= -1 << shift
	}
	return v
}

func (b *buf) cstr() string {
	for i := b.off; i < len(b.data); i++ {
		if b.data[i] == 0 {
			s := string(b.data[b.off:i])
			b.off = i + 1
			return s
		}
	}
	b.fail("unterminated string")
	return ""
}

func strAt(sec []byte, off uint64) (string, bool) {
	if off >= uint64(len(sec)) {
		return "", false
	}
	s := sec[off:]
	for i, c := range s {
		if c == 0 {
			return string(s[:i]), true
		}
	}
	return "", false
}

// DWARF constants used here.
const (
	formBlock2   = 0x03
	formBlock4   = 0x04
	formData2    = 0x05
	formData4    = 0x06
	formData8    = 0x07
	formString   = 0x08
	formBlock    = 0x09
	formBlock1   = 0x0a
	formData1    = 0x0b
	formSdata    = 0x0d
	formStrp     = 0x0e
	formUdata    = 0x0f
	formData16   = 0x1e
	formLineStrp = 0x1f

	lnctPath     = 1
	lnctDirIndex = 2
)

// Parse decodes the line table at offset off of secs.Line. addrSize is the
// compile unit's address size, used for DWARF < 5 tables (v5 headers carry
// their own). order is the byte order of the file.
func Parse(secs Sections, off uint64, addrSize int, order binary.ByteOrder) (*Table, error) {
	if off >= uint64(len(secs.Line)) {
		return nil, &FormatError{Offset: off, Msg: "line table offset past end of section"}
	}
	b := &buf{data: secs.Line[off:], base: off, le: order}
	length := uint64(b.u32())
	dwarf64 := false
	if length == 0xffffffff {
		dwarf64 = true
		length = b.u64()
	} else if length >= 0xfffffff0 {
		return nil, &FormatError{Offset: off, Msg: fmt.Sprintf("reserved unit length %#x", length)}
	}
	if b.err != nil {
		return nil, b.err
	}
	if length > uint64(len(b.data)-b.off) {
		return nil, &FormatError{Offset: off, Msg: fmt.Sprintf("unit length %#x past end of section", length)}
	}
	b.data = b.data[:b.off+int(length)]
	t := &Table{Offset: off}
	t.Version = b.u16()
	if t.Version < 2 || t.Version > 5 {
		return nil, &FormatError{Offset: off + 4, Msg: fmt.Sprintf("unsupported line table version %d", t.Version)}
	}
	if t.Version >= 5 {
		addrSize = int(b.u8())
		b.u8() // segment selector size
	}
	var hdrLen uint64
	if dwarf64 {
		hdrLen = b.u64()
	} else {
		hdrLen = uint64(b.u32())
	}
	if b.err != nil {
		return nil, b.err
	}
	if hdrLen > uint64(len(b.data)-b.off) {
		return nil, &FormatError{Offset: b.base + uint64(b.off), Msg: "header length past end of unit"}
	}
	progStart := b.off + int(hdrLen)
	minInst := uint64(b.u8())
	if t.Version >= 4 {
		b.u8() // maximum_operations_per_instruction
	}
	defaultStmt := b.u8() != 0
	_ = defaultStmt
	lineBase := int8(b.u8())
	lineRange := b.u8()
	opBase := b.u8()
	var stdLens [maxOpcodeBase + 1]uint8
	for i := 1; i < int(opBase); i++ {
		stdLens[i] = b.u8()
	}
	if b.err != nil {
		return nil, b.err
	}
	if t.Version >= 5 {
		t.Dirs, _ = parseV5Entries(b, secs, dwarf64, true)
		var files []FileEntry
		_, files = parseV5Entries(b, secs, dwarf64, false)
		t.Files = files
	} else {
		for b.err == nil {
			s := b.cstr()
			if s == "" {
				break
			}
			if len(t.Dirs) >= maxEntries {
				b.fail("too many include directories")
				break
			}
			t.Dirs = append(t.Dirs, s)
		}
		for b.err == nil {
			s := b.cstr()
			if s == "" {
				break
			}
			if len(t.Files) >= maxEntries {
				b.fail("too many files")
				break
			}
			dir := b.uleb()
			b.uleb()
			b.uleb()
			t.Files = append(t.Files, FileEntry{Name: s, Dir: dir})
		}
	}
	if b.err != nil {
		return nil, b.err
	}
	b.off = progStart
	// About one row per 3 bytes of program in compiler output.
	t.Rows = make([]Row, 0, (len(b.data)-progStart)/3+1)
	if err := t.run(b, addrSize, minInst, lineBase, lineRange, opBase, &stdLens); err != nil {
		return t, err
	}
	t.sortSeqs()
	return t, nil
}

func parseV5Entries(b *buf, secs Sections, dwarf64 bool, dirs bool) ([]string, []FileEntry) {
	nfmt := int(b.u8())
	if nfmt > maxFormats {
		b.fail("too many entry formats")
		return nil, nil
	}
	type pair struct{ ct, form uint64 }
	var fmts [maxFormats]pair
	for i := 0; i < nfmt; i++ {
		fmts[i] = pair{b.uleb(), b.uleb()}
	}
	n := b.uleb()
	if b.err != nil {
		return nil, nil
	}
	if n > maxEntries || n > uint64(len(b.data)-b.off) {
		b.fail(fmt.Sprintf("entry count %d too large", n))
		return nil, nil
	}
	var outD []string
	var outF []FileEntry
	for i := uint64(0); i < n && b.err == nil; i++ {
		var name string
		var dir uint64
		for j := 0; j < nfmt; j++ {
			ct, form := fmts[j].ct, fmts[j].form
			var sval string
			var uval uint64
			switch form {
			case formString:
				sval = b.cstr()
			case formLineStrp, formStrp:
				var o uint64
				if dwarf64 {
					o = b.u64()
				} else {
					o = uint64(b.u32())
				}
				sec := secs.LineStr
				if form == formStrp {
					sec = secs.Str
				}
				s, ok := strAt(sec, o)
				if !ok && b.err == nil {
					b.fail(fmt.Sprintf("string offset %#x out of range", o))
				}
				sval = s
			case formUdata:
				uval = b.uleb()
			case formSdata:
				uval = uint64(b.sleb())
			case formData1:
				uval = uint64(b.u8())
			case formData2:
				uval = uint64(b.u16())
			case formData4:
				uval = uint64(b.u32())
			case formData8:
				uval = b.u64()
			case formData16:
				b.bytes(16)
			case formBlock:
				b.bytes(b.uleb())
			case formBlock1:
				b.bytes(uint64(b.u8()))
			case formBlock2:
				b.bytes(uint64(b.u16()))
			case formBlock4:
				b.bytes(uint64(b.u32()))
			default:
				b.fail(fmt.Sprintf("unsupported form %#x in entry format", form))
			}
			switch ct {
			case lnctPath:
				name = sval
			case lnctDirIndex:
				dir = uval
			}
		}
		if dirs {
			outD = append(outD, name)
		} else {
			outF = append(outF, FileEntry{Name: name, Dir: dir})
		}
	}
	return outD, outF
}

// state is the line-number state machine's registers.
type state struct {
	addr   uint64
	file   uint64
	line   uint64
	column uint64
}

func (t *Table) run(b *buf, addrSize int, minInst uint64, lineBase int8, lineRange, opBase uint8, stdLens *[maxOpcodeBase + 1]uint8) error {
	st := state{file: 1, line: 1}
	seqStart := -1
	var seqLow uint64
	emit := func(end bool) {
		if seqStart < 0 {
			seqStart = len(t.Rows)
			seqLow = st.addr
		}
		t.Rows = append(t.Rows, Row{Addr: st.addr, Line: uint32(st.line), Column: uint16(st.column), File: uint16(st.file), End: end})
		if end {
			if seqLow < st.addr && seqStart < len(t.Rows)-1 {
				t.Seqs = append(t.Seqs, Seq{Low: seqLow, High: st.addr, First: seqStart, Last: len(t.Rows)})
			}
			seqStart = -1
			st = state{file: 1, line: 1}
		}
	}
	// A row needs at least one byte of program; cap rows by program size
	// so a hostile table cannot make us allocate more than it is long.
	for b.off < len(b.data) && b.err == nil {
		op := b.u8()
		if op >= opBase {
			adj := uint64(op - opBase)
			if lineRange != 0 {
				st.addr += (adj / uint64(lineRange)) * minInst
				st.line += uint64(int64(lineBase) + int64(adj%uint64(lineRange)))
			}
			emit(false)
			continue
		}
		switch op {
		case 0: // extended
			n := b.uleb()
			if b.err != nil {
				break
			}
			if n == 0 || n > uint64(len(b.data)-b.off) {
				b.fail(fmt.Sprintf("extended opcode length %d out of range", n))
				break
			}
			end := b.off + int(n)
			sub := b.u8()
			switch sub {
			case 1: // end_sequence
				emit(true)
			case 2: // set_address
				sz := int(n - 1)
				if sz != 1 && sz != 2 && sz != 4 && sz != 8 {
					sz = addrSize
				}
				st.addr = b.uint(sz)
			case 3: // define_file
				name := b.cstr()
				dir := b.uleb()
				if len(t.Files) < maxEntries {
					t.Files = append(t.Files, FileEntry{Name: name, Dir: dir})
				}
			}
			b.off = end
		case 1: // copy
			emit(false)
		case 2: // advance_pc
			st.addr += b.uleb() * minInst
		case 3: // advance_line
			st.line += uint64(b.sleb())
		case 4: // set_file
			st.file = b.uleb()
		case 5: // set_column
			st.column = b.uleb()
		case 6, 7, 10, 11: // negate_stmt, basic_block, prologue_end, epilogue_begin
		case 8: // const_add_pc
			if lineRange != 0 {
				st.addr += (uint64(255-opBase) / uint64(lineRange)) * minInst
			}
		case 9: // fixed_advance_pc
			st.addr += uint64(b.u16())
		default:
			for i := 0; i < int(stdLens[op]); i++ {
				b.uleb()
			}
		}
	}
	if b.err != nil {
		return b.err
	}
	return nil
}

func (t *Table) sortSeqs() {
	s := t.Seqs
	// insertion-friendly: sequences are nearly sorted in practice
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Low < s[j-1].Low; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Lookup returns the row describing addr: the last row at or below addr
// in the sequence that contains it (LLVM's rule). ok is false when no
// sequence covers addr.
func (t *Table) Lookup(addr uint64) (Row, bool) {
	// std::upper_bound over sequences by High, as LLVM does, so the
	// choice among overlapping sequences is the same.
	s := t.Seqs
	first, n := 0, len(s)
	for n > 0 {
		half := n >> 1
		if addr < s[first+half].High {
			n = half
		} else {
			first += half + 1
			n -= half + 1
		}
	}
	if first == len(s) {
		return Row{}, false
	}
	q := s[first]
	if addr < q.Low || addr >= q.High {
		return Row{}, false
	}
	// upper_bound over rows (First, Last-1) by address, minus one.
	lo, cnt := q.First+1, q.Last-1-(q.First+1)
	for cnt > 0 {
		half := cnt >> 1
		if addr < t.Rows[lo+half].Addr {
			cnt = half
		} else {
			lo += half + 1
			cnt -= half + 1
		}
	}
	return t.Rows[lo-1], true
}

// FileName returns the path of file index i, joined with its include
// directory and, where that is relative, with compDir — byte for byte as
// LLVM's AbsoluteFilePath does. ok is false for an invalid index.
func (t *Table) FileName(i uint64, compDir string) (string, bool) {
	return t.fileName(i, compDir, false)
}

// FileNameDir0 is FileName as later LLVMs (llvm-symbolizer 19) join
// paths: the compilation directory is not prepended to directory 0 of a
// DWARF 5 table, which already is the compilation directory (Go's "."
// gives "./<autogenerated>", not "././<autogenerated>"). The PE symbol
// sources, held to llvm-symbolizer 19, use it.
func (t *Table) FileNameDir0(i uint64, compDir string) (string, bool) {
	return t.fileName(i, compDir, true)
}

func (t *Table) fileName(i uint64, compDir string, dir0 bool) (string, bool) {
	var fe FileEntry
	if t.Version >= 5 {
		if i >= uint64(len(t.Files)) {
			return "", false
		}
		fe = t.Files[i]
	} else {
		if i == 0 || i > uint64(len(t.Files)) {
			return "", false
		}
		fe = t.Files[i-1]
	}
	if isAbs(fe.Name) {
		return fe.Name, true
	}
	var inc string
	if t.Version >= 5 {
		if fe.Dir < uint64(len(t.Dirs)) {
			inc = t.Dirs[fe.Dir]
		}
	} else if fe.Dir > 0 && fe.Dir <= uint64(len(t.Dirs)) {
		inc = t.Dirs[fe.Dir-1]
	}
	var sb strings.Builder
	// LLVM 14 prepends the compilation directory to every relative
	// include directory, in DWARF 5 too, where directory 0 already is
	// the compilation directory (Go's "." gives "././<autogenerated>").
	// Later LLVMs skip it for directory 0 of a DWARF 5 table; we follow
	// the llvm-symbolizer Debian ships unless dir0 asks for the later
	// rule (FileNameDir0).
	if compDir != "" && !isAbs(inc) && !(dir0 && t.Version >= 5 && fe.Dir == 0) {
		appendPath(&sb, compDir)
	}
	appendPath(&sb, inc)
	appendPath(&sb, fe.Name)
	return sb.String(), true
}

// appendPath mirrors llvm::sys::path::append in POSIX style.
func appendPath(sb *strings.Builder, c string) {
	if c == "" {
		return
	}
	cur := sb.String()
	if cur != "" && cur[len(cur)-1] == '/' {
		sb.WriteString(strings.TrimLeft(c, "/"))
		return
	}
	if cur != "" && c[0] != '/' {
		sb.WriteByte('/')
	}
	sb.WriteString(c)
}

// isAbs reports whether p is absolute in POSIX or Windows syntax.
func isAbs(p string) bool {
	if strings.HasPrefix(p, "/") {
		return true
	}
	if len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/') {
		return true
	}
	return strings.HasPrefix(p, `\\`)
}
