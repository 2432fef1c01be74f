package pdb

import (
	"strings"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/msvc"
)

// Binary annotation opcodes of S_INLINESITE.
const (
	baCodeOffset                    = 1
	baChangeCodeOffsetBase          = 2
	baChangeCodeOffset              = 3
	baChangeCodeLength              = 4
	baChangeFile                    = 5
	baChangeLineOffset              = 6
	baChangeLineEndDelta            = 7
	baChangeRangeKind               = 8
	baChangeColumnStart             = 9
	baChangeColumnEndDelta          = 10
	baChangeCodeOffsetAndLineOffset = 11
	baChangeCodeLengthAndCodeOffset = 12
	baChangeColumnEnd               = 13
)

// annotation is one decoded binary annotation.
type annotation struct {
	op     uint8
	u1, u2 uint32
	s1     int32
}

func decodeSigned(v uint32) int32 {
	if v&1 != 0 {
		return -int32(v >> 1)
	}
	return int32(v >> 1)
}

// annotations decodes the binary annotations of an inline site. Decoding
// stops at the first invalid opcode or truncated operand.
func annotations(p []byte, dst []annotation) []annotation {
	next := func() (uint32, bool) {
		if len(p) == 0 {
			return 0, false
		}
		b := p[0]
		switch {
		case b&0x80 == 0:
			p = p[1:]
			return uint32(b), true
		case b&0xC0 == 0x80:
			if len(p) < 2 {
				return 0, false
			}
			v := uint32(b&0x3F)<<8 | uint32(p[1])
			p = p[2:]
			return v, true
		case b&0xE0 == 0xC0:
			if len(p) < 4 {
				return 0, false
			}
			v := uint32(b&0x1F)<<24 | uint32(p[1])<<16 | uint32(p[2])<<8 | uint32(p[3])
			p = p[4:]
			return v, true
		}
		return 0, false
	}
	for {
		op, ok := next()
		if !ok || op == 0 || op > baChangeColumnEnd {
			return dst
		}
		a := annotation{op: uint8(op)}
		v, ok := next()
		if !ok {
			return dst
		}
		switch op {
		case baChangeCodeOffsetAndLineOffset:
			a.u1 = v & 0xF
			a.s1 = decodeSigned(v >> 4)
		case baChangeCodeLengthAndCodeOffset:
			a.u1 = v
			if a.u2, ok = next(); !ok {
				return dst
			}
		case baChangeLineOffset, baChangeColumnEndDelta:
			a.s1 = decodeSigned(v)
		default:
			a.u1 = v
		}
		dst = append(dst, a)
	}
}

// inlineContains says whether an inline site's code ranges cover off, the
// offset from the start of its procedure.
func inlineContains(an []annotation, off uint32) bool {
	found := false
	code := uint32(0)
	for _, a := range an {
		switch a.op {
		case baCodeOffset, baChangeCodeOffset, baChangeCodeOffsetAndLineOffset:
			code += a.u1
			if off >= code {
				found = true
			}
		case baChangeCodeLength:
			code += a.u1
			if found && off < code {
				return true
			}
			found = false
		case baChangeCodeLengthAndCodeOffset:
			code += a.u2
			if off >= code {
				found = true
			}
			code += a.u1
			if found && off < code {
				return true
			}
			found = false
		}
	}
	return false
}

// inlineLineOffset returns the line offset (from the inlinee's first
// line) and the file (a FILECHKSMS offset, 0 for the inlinee's own file)
// of the code range of an inline site that holds off, the offset from the
// start of its procedure. The annotations describe consecutive code
// ranges: a code offset change opens a range (or, when one is open, sets
// its length), and a line or file change that follows the opening of a
// range applies to the range after it. When no range holds off, the sum
// of all line offsets and the file in effect at the start are returned.
//
// These are the semantics of llvm-symbolizer 19's native PDB reader, and
// the code's: in an inlined call that spans lines, each range gets its
// own line. LLVM 14 took the line in effect at the first annotation at
// or past off, one range late, which gave the next line's number to the
// first instructions of many ranges.
func inlineLineOffset(an []annotation, off uint32) (lineOff int32, file uint32) {
	var (
		code             uint32
		start, end       uint32
		hasStart, hasEnd bool
		cur, next        int32
		hasCur, hasNext  bool
		nextFile         uint32
		hasNextFile      bool
	)
	codeDelta := func(d uint32) {
		if !hasStart {
			start, hasStart = code, true
		} else if !hasEnd {
			end, hasEnd = start+d, true
		}
	}
	for _, a := range an {
		switch a.op {
		case baCodeOffset, baChangeCodeOffset, baChangeCodeOffsetBase:
			code += a.u1
			codeDelta(a.u1)
		case baChangeCodeLength:
			codeDelta(a.u1)
		case baChangeCodeLengthAndCodeOffset:
			code += a.u2
			codeDelta(a.u2)
			codeDelta(a.u1)
		case baChangeLineOffset, baChangeCodeOffsetAndLineOffset:
			if a.op == baChangeCodeOffsetAndLineOffset {
				code += a.u1
				codeDelta(a.u1)
			}
			lineOff += a.s1
			if !hasStart || !hasCur {
				cur, hasCur = lineOff, true
			} else {
				next, hasNext = lineOff, true
			}
		case baChangeFile:
			if !hasStart {
				file = a.u1
			} else {
				nextFile, hasNextFile = a.u1, true
			}
		default:
			continue
		}
		if hasStart && hasEnd && hasCur {
			if start <= off && off < end {
				return cur, file
			}
			if hasNextFile {
				file = nextFile
			}
			if hasNext {
				cur, hasNext = next, false
			}
			start, hasEnd, hasNextFile = end, false, false
		}
	}
	return lineOff, file
}

// Symbolize implements symbolizer.Source. addr is an image RVA. The frames
// follow llvm-symbolizer's native PDB reader: innermost inlined function
// first, each with the file and line at addr inside it, then the
// procedure with the line table's file and line.
func (f *File) Symbolize(addr uint64, dst []symbolizer.Frame) ([]symbolizer.Frame, error) {
	if addr >= 1<<32 {
		return dst, nil
	}
	rva, ok := f.imageToSymRVA(uint32(addr))
	if !ok {
		return dst, nil
	}
	pubs, err := f.publicSymbols()
	if err != nil {
		return dst, err
	}
	var m *modInfo
	var p *proc
	if mi, ok := f.moduleAt(rva); ok {
		if m, err = f.module(mi); err != nil {
			return dst, err
		}
		p, _ = m.procAt(rva)
	}

	// The procedure's name, or the public symbol's (a linkage name) when
	// it starts at the same address or there is no procedure.
	var name string
	if pi := pubs.at(rva); pi >= 0 && (p == nil || p.rva == pubs.rvas[pi]) {
		name = pubs.name(pi)
	} else if p != nil {
		name = p.name
	}
	if m == nil && name == "" {
		return dst, nil
	}
	outer := symbolizer.Frame{Function: f.demangled(name)}
	if m != nil {
		if le, ok := m.lineAt(rva); ok {
			outer.Line = int(le.line)
			outer.Column = int(le.column)
			outer.File, _ = f.chksumFile(m, le.file)
		}
	}
	if outer.Function == "" && outer.File == "" {
		return dst, nil
	}
	if p != nil {
		dst = f.inlineFrames(m, p, rva, dst)
	}
	return append(dst, outer), nil
}

func (f *File) chksumFile(m *modInfo, off uint32) (string, bool) {
	nameOff, ok := m.chksums[off]
	if !ok {
		return "", false
	}
	s, err := f.Name(nameOff)
	return s, err == nil
}

// inlineFrames appends the inlined frames at rva inside p, innermost first.
func (f *File) inlineFrames(m *modInfo, p *proc, rva uint32, dst []symbolizer.Frame) []symbolizer.Frame {
	off := rva - p.rva
	syms := m.syms[:m.symEnd]
	type site struct {
		id  uint32
		ann []byte // binary annotations
	}
	var chainBuf [8]site
	chain := chainBuf[:0]
	var annBuf [32]annotation
	buf := annBuf[:0]
	pos, end := p.recOff, p.end
	if end > uint32(len(syms)) || end <= pos {
		end = uint32(len(syms))
	}
	for pos < end {
		found := false
		for pos+4 <= end {
			l := uint32(le16(syms[pos:]))
			if l < 2 || pos+2+l > uint32(len(syms)) {
				pos = end
				break
			}
			kind := le16(syms[pos+2:])
			annOff := uint32(12) // S_INLINESITE: parent, end, inlinee
			if kind == sInlineSite2 {
				annOff = 16 // and an invocation count
			} else if kind != sInlineSite {
				pos += 2 + l
				continue
			}
			if l < 2+annOff {
				pos += 2 + l
				continue
			}
			d := syms[pos+4 : pos+2+l]
			siteEnd := le32(d[4:])
			buf = annotations(d[annOff:], buf[:0])
			if inlineContains(buf, off) {
				chain = append(chain, site{le32(d[8:]), d[annOff:]})
				if siteEnd > pos && siteEnd <= end {
					end = siteEnd
				}
				pos += 2 + l
				found = true
				break
			}
			if siteEnd <= pos || siteEnd >= end {
				pos = end
				break
			}
			pos = siteEnd
		}
		if !found {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		s := chain[i]
		il, ok := m.inlinees[s.id]
		if !ok {
			break
		}
		buf = annotations(s.ann, buf[:0])
		lo, fileOff := inlineLineOffset(buf, off)
		if fileOff == 0 {
			fileOff = il.file
		}
		fr := symbolizer.Frame{Function: f.demangled(f.inlineeNameCached(s.id)), Line: int(int32(il.line) + lo)}
		fr.File, _ = f.chksumFile(m, fileOff)
		dst = append(dst, fr)
	}
	return dst
}

// Demangle demangles a linkage name the way llvm-symbolizer does: MSVC
// (?) names without access specifiers, calling conventions, member kinds
// and return types; Itanium and Rust names with [symbolizer.Demangle].
// Other names, and names that do not demangle, are returned unchanged.
func Demangle(name string) string {
	if strings.HasPrefix(name, "?") {
		if s, err := msvc.Demangle(name, msvc.Symbolizer); err == nil {
			return s
		}
		return name
	}
	return symbolizer.Demangle(name)
}

// demangled returns Demangle(name), cached: a profile symbolizes the same
// functions over and over.
func (f *File) demangled(name string) string {
	if name == "" {
		return ""
	}
	if v, ok := f.demangleCache.Load(name); ok {
		return v.(string)
	}
	d := Demangle(name)
	f.demangleCache.Store(name, d)
	return d
}

// inlineeNameCached returns f.inlineeName(id), cached.
func (f *File) inlineeNameCached(id uint32) string {
	if v, ok := f.inlineeCache.Load(id); ok {
		return v.(string)
	}
	n := f.inlineeName(id)
	f.inlineeCache.Store(id, n)
	return n
}
