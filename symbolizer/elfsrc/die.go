package elfsrc

import (
	"encoding/binary"
	"fmt"
)

// A fast reader of the debug information entries symbolization needs.
// debug/dwarf's Reader decodes every attribute of every entry into
// interface values; building the inline tree of a big C++ unit that way
// costs more than llvm-symbolizer's whole run. This reader walks entries
// with precomputed abbreviations, skips what it does not need and
// allocates only for subroutines.

// dwarfSecs holds the decompressed sections the reader uses.
type dwarfSecs struct {
	info, abbrev, str, lineStr, strOffsets, addr, ranges, rnglists []byte
	order                                                          binary.ByteOrder
}

// unitHdr is what the reader needs to know about a unit.
type unitHdr struct {
	start, end   uint64 // unit header offset, end of unit
	die          uint64 // offset of the unit DIE
	version      uint16
	addrSize     int
	offSize      int // 4 or 8
	abbrevOff    uint64
	strOffBase   uint64
	addrBase     uint64
	rnglistsBase uint64
	base         uint64 // DW_AT_low_pc of the unit DIE: base of range lists
}

const (
	tagInlined    = 0x1d
	tagSubprogram = 0x2e

	atName          = 0x03
	atLowPC         = 0x11
	atHighPC        = 0x12
	atAbstractOrig  = 0x31
	atSpecification = 0x47
	atRanges        = 0x55
	atCallColumn    = 0x57
	atCallFile      = 0x58
	atCallLine      = 0x59
	atLinkageName   = 0x6e
	atMIPSLinkage   = 0x2007

	formAddr          = 0x01
	formBlock2        = 0x03
	formBlock4        = 0x04
	formData2         = 0x05
	formData4         = 0x06
	formData8         = 0x07
	formString        = 0x08
	formBlock         = 0x09
	formBlock1        = 0x0a
	formData1         = 0x0b
	formFlag          = 0x0c
	formSdata         = 0x0d
	formStrp          = 0x0e
	formUdata         = 0x0f
	formRefAddr       = 0x10
	formRef1          = 0x11
	formRef2          = 0x12
	formRef4          = 0x13
	formRef8          = 0x14
	formRefUdata      = 0x15
	formIndirect      = 0x16
	formSecOffset     = 0x17
	formExprloc       = 0x18
	formFlagPresent   = 0x19
	formStrx          = 0x1a
	formAddrx         = 0x1b
	formRefSup4       = 0x1c
	formStrpSup       = 0x1d
	formData16        = 0x1e
	formLineStrp      = 0x1f
	formRefSig8       = 0x20
	formImplicitConst = 0x21
	formLoclistx      = 0x22
	formRnglistx      = 0x23
	formRefSup8       = 0x24
	formStrx1         = 0x25
	formStrx2         = 0x26
	formStrx3         = 0x27
	formStrx4         = 0x28
	formAddrx1        = 0x29
	formAddrx2        = 0x2a
	formAddrx3        = 0x2b
	formAddrx4        = 0x2c
	formGNUAddrIndex  = 0x1f01
	formGNUStrIndex   = 0x1f02
	formGNURefAlt     = 0x1f20
	formGNUStrpAlt    = 0x1f21
)

type attrSpec struct {
	attr, form uint16
	implicit   int64
}

type abbrev struct {
	tag      uint16
	children bool
	attrs    []attrSpec
	// fixed is the byte size of all attributes when every form has a
	// fixed size (so entries of uninteresting tags skip in one step), or -1.
	fixed int
}

type abbrevTable struct {
	dense  []*abbrev // by code, for small codes
	sparse map[uint64]*abbrev
}

func (t *abbrevTable) get(code uint64) *abbrev {
	if code < uint64(len(t.dense)) {
		return t.dense[code]
	}
	return t.sparse[code]
}

type dieBuf struct {
	b   []byte
	off int
	err error
	bo  binary.ByteOrder
}

func (d *dieBuf) fail(msg string) {
	if d.err == nil {
		d.err = fmt.Errorf("debug_info offset %#x: %s", d.off, msg)
	}
	d.off = len(d.b)
}

func (d *dieBuf) u8() uint8 {
	if d.off >= len(d.b) {
		d.fail("unexpected end")
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *dieBuf) skip(n uint64) {
	if n > uint64(len(d.b)-d.off) {
		d.fail("unexpected end")
		return
	}
	d.off += int(n)
}

func (d *dieBuf) uint(n int) uint64 {
	if n > len(d.b)-d.off || n < 0 {
		d.fail("unexpected end")
		return 0
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	switch n {
	case 1:
		return uint64(p[0])
	case 2:
		return uint64(d.bo.Uint16(p))
	case 3:
		if d.bo == binary.BigEndian {
			return uint64(p[0])<<16 | uint64(p[1])<<8 | uint64(p[2])
		}
		return uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16
	case 4:
		return uint64(d.bo.Uint32(p))
	case 8:
		return d.bo.Uint64(p)
	}
	d.fail(fmt.Sprintf("integer size %d", n))
	return 0
}

func (d *dieBuf) uleb() uint64 {
	var v uint64
	var shift uint
	for d.off < len(d.b) {
		c := d.b[d.off]
		d.off++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			return v
		}
	}
	d.fail("unterminated LEB128")
	return 0
}

func (d *dieBuf) sleb() int64 {
	var v int64
	var shift uint
	for d.off < len(d.b) {
		c := d.b[d.off]
		d.off++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
	d.fail("unterminated LEB128")
	return 0
}

func (d *dieBuf) cstr() []byte {
	for i := d.off; i < len(d.b); i++ {
		if d.b[i] == 0 {
			s := d.b[d.off:i]
			d.off = i + 1
			return s
		}
	}
	d.fail("unterminated string")
	return nil
}

// maxAbbrevs caps the abbreviations of one table.
const maxAbbrevs = 1 << 20

func parseAbbrevs(sec []byte, off uint64) (*abbrevTable, error) {
	if off > uint64(len(sec)) {
		return nil, fmt.Errorf("debug_abbrev offset %#x past end", off)
	}
	d := &dieBuf{b: sec, off: int(off)}
	t := &abbrevTable{}
	for n := 0; n < maxAbbrevs; n++ {
		code := d.uleb()
		if code == 0 || d.err != nil {
			break
		}
		a := &abbrev{tag: uint16(d.uleb()), children: d.u8() != 0}
		for d.err == nil {
			at, form := d.uleb(), d.uleb()
			if at == 0 && form == 0 {
				break
			}
			sp := attrSpec{attr: uint16(at), form: uint16(form)}
			if form == formImplicitConst {
				sp.implicit = d.sleb()
			}
			a.attrs = append(a.attrs, sp)
		}
		if code < 4096 {
			for uint64(len(t.dense)) <= code {
				t.dense = append(t.dense, nil)
			}
			t.dense[code] = a
		} else {
			if t.sparse == nil {
				t.sparse = map[uint64]*abbrev{}
			}
			t.sparse[code] = a
		}
	}
	if d.err != nil {
		return nil, fmt.Errorf("debug_abbrev: %w", d.err)
	}
	return t, nil
}

// parseAbbrev returns the table at off reduced to the abbreviation code,
// as parseAbbrevs would read it (the last definition of a code wins; the
// same errors), without building the others: a unit's DIE is all the
// unit index reads, and libc6-dbg has a table per unit.
func parseAbbrev(sec []byte, off, code uint64) (*abbrevTable, error) {
	if off > uint64(len(sec)) {
		return nil, fmt.Errorf("debug_abbrev offset %#x past end", off)
	}
	d := &dieBuf{b: sec, off: int(off)}
	var found *abbrev
	for n := 0; n < maxAbbrevs; n++ {
		c := d.uleb()
		if c == 0 || d.err != nil {
			break
		}
		tag, children := d.uleb(), d.u8() != 0
		var a *abbrev
		if c == code {
			a = &abbrev{tag: uint16(tag), children: children}
			found = a
		}
		for d.err == nil {
			at, form := d.uleb(), d.uleb()
			if at == 0 && form == 0 {
				break
			}
			sp := attrSpec{attr: uint16(at), form: uint16(form)}
			if form == formImplicitConst {
				sp.implicit = d.sleb()
			}
			if a != nil {
				a.attrs = append(a.attrs, sp)
			}
		}
	}
	if d.err != nil {
		return nil, fmt.Errorf("debug_abbrev: %w", d.err)
	}
	t := &abbrevTable{}
	if found != nil {
		if code < 4096 {
			t.dense = make([]*abbrev, code+1)
			t.dense[code] = found
		} else {
			t.sparse = map[uint64]*abbrev{code: found}
		}
	}
	return t, nil
}

// fixedFormSize returns the size of a form that has one, else -1.
func fixedFormSize(form uint16, h *unitHdr) int {
	switch form {
	case formAddr:
		return h.addrSize
	case formData1, formRef1, formFlag, formStrx1, formAddrx1:
		return 1
	case formData2, formRef2, formStrx2, formAddrx2:
		return 2
	case formStrx3, formAddrx3:
		return 3
	case formData4, formRef4, formRefSup4, formStrx4, formAddrx4:
		return 4
	case formData8, formRef8, formRefSig8, formRefSup8:
		return 8
	case formData16:
		return 16
	case formStrp, formSecOffset, formLineStrp, formStrpSup, formGNURefAlt, formGNUStrpAlt:
		return h.offSize
	case formRefAddr:
		if h.version <= 2 {
			return h.addrSize
		}
		return h.offSize
	case formFlagPresent, formImplicitConst:
		return 0
	}
	return -1
}

func (t *abbrevTable) computeFixed(h *unitHdr) {
	set := func(a *abbrev) {
		a.fixed = 0
		for _, sp := range a.attrs {
			n := fixedFormSize(sp.form, h)
			if n < 0 {
				a.fixed = -1
				return
			}
			a.fixed += n
		}
	}
	for _, a := range t.dense {
		if a != nil {
			set(a)
		}
	}
	for _, a := range t.sparse {
		set(a)
	}
}

// skipForm skips the value of one attribute.
func (d *dieBuf) skipForm(form uint16, h *unitHdr) {
	if n := fixedFormSize(form, h); n >= 0 {
		d.skip(uint64(n))
		return
	}
	switch form {
	case formString:
		d.cstr()
	case formBlock1:
		d.skip(uint64(d.u8()))
	case formBlock2:
		d.skip(d.uint(2))
	case formBlock4:
		d.skip(d.uint(4))
	case formBlock, formExprloc:
		d.skip(d.uleb())
	case formSdata:
		d.sleb()
	case formUdata, formRefUdata, formStrx, formAddrx, formLoclistx, formRnglistx, formGNUAddrIndex, formGNUStrIndex:
		d.uleb()
	case formIndirect:
		f := d.uleb()
		if f == formIndirect {
			d.fail("nested DW_FORM_indirect")
			return
		}
		d.skipForm(uint16(f), h)
	default:
		d.fail(fmt.Sprintf("unknown form %#x", form))
	}
}

// value reads one attribute as an integer (constants, addresses,
// references, offsets, indexes) or a string.
type value struct {
	u     uint64
	s     []byte
	isStr bool
	ok    bool
}

func (s *dwarfSecs) readValue(d *dieBuf, sp attrSpec, h *unitHdr) value {
	form := sp.form
	if form == formIndirect {
		form = uint16(d.uleb())
	}
	switch form {
	case formAddr:
		return value{u: d.uint(h.addrSize), ok: true}
	case formData1, formRef1, formFlag:
		return value{u: d.uint(1), ok: true}
	case formData2, formRef2:
		return value{u: d.uint(2), ok: true}
	case formData4, formRef4:
		return value{u: d.uint(4), ok: true}
	case formData8, formRef8:
		return value{u: d.uint(8), ok: true}
	case formUdata, formRefUdata, formRnglistx:
		return value{u: d.uleb(), ok: true}
	case formSdata:
		return value{u: uint64(d.sleb()), ok: true}
	case formImplicitConst:
		return value{u: uint64(sp.implicit), ok: true}
	case formSecOffset:
		return value{u: d.uint(h.offSize), ok: true}
	case formRefAddr:
		if h.version <= 2 {
			return value{u: d.uint(h.addrSize), ok: true}
		}
		return value{u: d.uint(h.offSize), ok: true}
	case formAddrx, formGNUAddrIndex:
		return s.addrx(d.uleb(), h)
	case formAddrx1, formAddrx2, formAddrx3, formAddrx4:
		return s.addrx(d.uint(int(form-formAddrx1)+1), h)
	case formString:
		return value{s: d.cstr(), isStr: true, ok: true}
	case formStrp:
		return strAt(s.str, d.uint(h.offSize))
	case formLineStrp:
		return strAt(s.lineStr, d.uint(h.offSize))
	case formStrx, formGNUStrIndex:
		return s.strx(d.uleb(), h)
	case formStrx1, formStrx2, formStrx3, formStrx4:
		return s.strx(d.uint(int(form-formStrx1)+1), h)
	}
	d.skipForm(form, h)
	return value{}
}

func strAt(sec []byte, off uint64) value {
	if off >= uint64(len(sec)) {
		return value{}
	}
	b := sec[off:]
	for i, c := range b {
		if c == 0 {
			return value{s: b[:i], isStr: true, ok: true}
		}
	}
	return value{}
}

func (s *dwarfSecs) addrx(i uint64, h *unitHdr) value {
	off := h.addrBase + i*uint64(h.addrSize)
	if i > 1<<32 || off+uint64(h.addrSize) > uint64(len(s.addr)) {
		return value{}
	}
	d := dieBuf{b: s.addr, off: int(off), bo: s.order}
	return value{u: d.uint(h.addrSize), ok: d.err == nil}
}

func (s *dwarfSecs) strx(i uint64, h *unitHdr) value {
	off := h.strOffBase + i*uint64(h.offSize)
	if i > 1<<32 || off+uint64(h.offSize) > uint64(len(s.strOffsets)) {
		return value{}
	}
	d := dieBuf{b: s.strOffsets, off: int(off), bo: s.order}
	return strAt(s.str, d.uint(h.offSize))
}

// maxRanges caps the entries read from one range list.
const maxRanges = 1 << 16

// rangesAt appends the ranges of a DW_AT_ranges value. rnglistx says the
// value is an index into the unit's offset table (DWARF 5).
func (s *dwarfSecs) rangesAt(v uint64, rnglistx bool, h *unitHdr, dst [][2]uint64) [][2]uint64 {
	if h.version < 5 {
		d := dieBuf{b: s.ranges, off: 0, bo: s.order}
		if v >= uint64(len(s.ranges)) {
			return dst
		}
		d.off = int(v)
		base := h.base
		maxAddr := ^uint64(0)
		if h.addrSize == 4 {
			maxAddr = 0xffffffff
		}
		for n := 0; n < maxRanges && d.err == nil; n++ {
			lo, hi := d.uint(h.addrSize), d.uint(h.addrSize)
			if d.err != nil || lo == 0 && hi == 0 {
				break
			}
			if lo == maxAddr {
				base = hi
				continue
			}
			dst = append(dst, [2]uint64{base + lo, base + hi})
		}
		return dst
	}
	off := v
	if rnglistx {
		p := h.rnglistsBase + v*uint64(h.offSize)
		if v > 1<<32 || p+uint64(h.offSize) > uint64(len(s.rnglists)) {
			return dst
		}
		d := dieBuf{b: s.rnglists, off: int(p), bo: s.order}
		off = h.rnglistsBase + d.uint(h.offSize)
	}
	if off >= uint64(len(s.rnglists)) {
		return dst
	}
	d := dieBuf{b: s.rnglists, off: int(off), bo: s.order}
	base := h.base
	for n := 0; n < maxRanges && d.err == nil; n++ {
		switch d.u8() {
		case 0: // end_of_list
			return dst
		case 1: // base_addressx
			base = s.addrx(d.uleb(), h).u
		case 2: // startx_endx
			lo, hi := s.addrx(d.uleb(), h).u, s.addrx(d.uleb(), h).u
			dst = append(dst, [2]uint64{lo, hi})
		case 3: // startx_length
			lo := s.addrx(d.uleb(), h).u
			dst = append(dst, [2]uint64{lo, lo + d.uleb()})
		case 4: // offset_pair
			lo, hi := d.uleb(), d.uleb()
			dst = append(dst, [2]uint64{base + lo, base + hi})
		case 5: // base_address
			base = d.uint(h.addrSize)
		case 6: // start_end
			lo, hi := d.uint(h.addrSize), d.uint(h.addrSize)
			dst = append(dst, [2]uint64{lo, hi})
		case 7: // start_length
			lo := d.uint(h.addrSize)
			dst = append(dst, [2]uint64{lo, lo + d.uleb()})
		default:
			return dst
		}
	}
	return dst
}

// abbrevs returns the abbreviation table at off, parsed once per Source.
func (s *Source) abbrevs(off uint64) (*abbrevTable, error) {
	s.abbrevMu.Lock()
	defer s.abbrevMu.Unlock()
	if t, ok := s.abbrevCache[off]; ok {
		return t, nil
	}
	t, err := parseAbbrevs(s.secs.abbrev, off)
	if err != nil {
		return nil, err
	}
	if s.abbrevCache == nil {
		s.abbrevCache = map[uint64]*abbrevTable{}
	}
	s.abbrevCache[off] = t
	return t, nil
}
