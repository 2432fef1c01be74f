package pdb

import (
	"sort"
)

// CodeView symbol record kinds used here.
const (
	sEnd           = 0x0006
	sBlock32       = 0x1103
	sPub32         = 0x110E
	sLProc32       = 0x110F
	sGProc32       = 0x1110
	sLProc32ID     = 0x1146
	sGProc32ID     = 0x1147
	sInlineSite    = 0x114D
	sInlineSiteEnd = 0x114E
	sProcIDEnd     = 0x114F
	sLProc32DPC    = 0x1155
	sLProc32DPCID  = 0x1156
	sInlineSite2   = 0x115D
)

// C13 debug subsection kinds.
const (
	debugSLines       = 0xF2
	debugSFileChksms  = 0xF4
	debugSInlineLines = 0xF6
)

// proc is one top-level procedure of a module.
type proc struct {
	rva    uint32 // start, symbols' address space
	size   uint32
	name   string
	recOff uint32 // record offset in the module stream
	end    uint32 // offset of the matching S_END
}

// lineEntry is one row of a module's flattened line table.
type lineEntry struct {
	rva      uint32
	line     uint32
	column   uint16
	file     uint32 // offset into the FILECHKSMS subsection
	terminal bool   // marks the end of a line block
}

// inlineeLine is the start of an inlined function: where its source is.
type inlineeLine struct {
	file uint32 // FILECHKSMS offset
	line uint32
}

// modInfo is a parsed module stream.
type modInfo struct {
	syms     []byte                 // the whole module stream (record offsets index it)
	symEnd   uint32                 // end of the symbol records
	procs    []proc                 // sorted by rva
	lines    []lineEntry            // sorted by block start
	chksums  map[uint32]uint32      // FILECHKSMS offset → /names offset
	inlinees map[uint32]inlineeLine // inlinee id → first line
	err      error
}

// module returns the parsed stream of module i.
func (f *File) module(i int) (*modInfo, error) {
	f.mu.Lock()
	m := f.mods[i]
	f.mu.Unlock()
	if m != nil {
		return m, m.err
	}
	m = f.parseModule(i)
	f.mu.Lock()
	if f.mods[i] == nil {
		f.mods[i] = m
	}
	m = f.mods[i]
	f.mu.Unlock()
	return m, m.err
}

func (f *File) parseModule(i int) *modInfo {
	m := &modInfo{chksums: map[uint32]uint32{}, inlinees: map[uint32]inlineeLine{}}
	md := f.Modules[i]
	if md.SymStream < 0 {
		return m
	}
	b, err := f.msf.stream(md.SymStream)
	if err != nil {
		m.err = err
		return m
	}
	m.syms = b
	st := md.SymStream
	if uint64(md.SymBytes)+uint64(md.C11Bytes)+uint64(md.C13Bytes) > uint64(len(b)) {
		m.err = &FormatError{File: f.name, Stream: st, Msg: "module sizes exceed the module stream"}
		return m
	}
	m.symEnd = md.SymBytes

	// Top-level procedures.
	r := newReader(b[:md.SymBytes], f.name, st)
	if md.SymBytes >= 4 {
		r.u32() // CV_SIGNATURE_C13
	}
	for r.remaining() >= 4 && r.err == nil {
		recOff := uint32(r.off)
		n := int(r.u16())
		if n < 2 || n > r.remaining() {
			r.errorf("bad symbol record length %d", n)
			break
		}
		rec := r.bytes(n)
		kind := le16(rec)
		switch kind {
		case sGProc32, sLProc32, sGProc32ID, sLProc32ID, sLProc32DPC, sLProc32DPCID:
			if len(rec) < 2+35 {
				r.errorf("short procedure record")
				break
			}
			d := rec[2:]
			p := proc{
				size:   le32(d[12:]),
				recOff: recOff,
				end:    le32(d[4:]),
				name:   cstr(d[35:]),
			}
			rva, ok := f.sectRVA(le16(d[32:]), le32(d[28:]))
			if !ok {
				break
			}
			p.rva = rva
			m.procs = append(m.procs, p)
			// Skip the procedure's children: jump to its S_END.
			if p.end > recOff && p.end < md.SymBytes {
				r.off = int(p.end)
			}
		}
	}
	sort.SliceStable(m.procs, func(i, j int) bool { return m.procs[i].rva < m.procs[j].rva })

	// C13 subsections.
	c13 := b[md.SymBytes+md.C11Bytes : md.SymBytes+md.C11Bytes+md.C13Bytes]
	base := int64(md.SymBytes + md.C11Bytes)
	type block struct{ entries []lineEntry }
	var blocks [][]lineEntry
	cr := newReader(c13, f.name, st)
	for cr.remaining() >= 8 && cr.err == nil {
		kind := cr.u32()
		n := cr.u32()
		if n > uint32(cr.remaining()) {
			cr.errorf("subsection of %d bytes exceeds the module stream", n)
			break
		}
		ssOff := cr.off
		data := cr.bytes(int(n))
		cr.align(4)
		sr := newReader(data, f.name, st)
		switch kind &^ 0x80000000 {
		case debugSLines:
			relOff := sr.u32()
			seg := sr.u16()
			flags := sr.u16()
			codeSize := sr.u32()
			start, ok := f.sectRVA(seg, relOff)
			if !ok {
				continue
			}
			hasCols := flags&1 != 0
			for sr.remaining() >= 12 && sr.err == nil {
				file := sr.u32()
				nLines := sr.u32()
				sr.u32() // block size
				per := 8
				if hasCols {
					per = 12
				}
				if nLines > uint32(sr.remaining()/per) {
					sr.errorf("line block of %d lines exceeds its subsection", nLines)
					break
				}
				if nLines == 0 {
					continue
				}
				ents := make([]lineEntry, 0, nLines+2)
				lines := sr.bytes(int(nLines) * 8)
				var cols []byte
				if hasCols {
					cols = sr.bytes(int(nLines) * 4)
				}
				col := func(k int) uint16 {
					if cols == nil {
						return 0
					}
					return le16(cols[k*4:])
				}
				// Like LLVM: a row at the block start with the first line,
				// one per line entry, and an end row at start+codeSize.
				ents = append(ents, lineEntry{rva: start, line: le32(lines[4:]) & 0xFFFFFF, column: col(0), file: file})
				for k := 0; k < int(nLines); k++ {
					ents = append(ents, lineEntry{rva: start + le32(lines[k*8:]), line: le32(lines[k*8+4:]) & 0xFFFFFF, column: col(k), file: file})
				}
				last := le32(lines[(nLines-1)*8+4:]) & 0xFFFFFF
				ents = append(ents, lineEntry{rva: start + codeSize, line: last, column: col(int(nLines) - 1), file: file, terminal: true})
				blocks = append(blocks, ents)
			}
		case debugSFileChksms:
			for sr.remaining() >= 6 && sr.err == nil {
				off := uint32(sr.off)
				name := sr.u32()
				csLen := sr.u8()
				sr.u8()
				sr.skip(int(csLen))
				sr.align(4)
				m.chksums[off] = name
			}
		case debugSInlineLines:
			sig := sr.u32()
			for sr.remaining() >= 12 && sr.err == nil {
				id := sr.u32()
				file := sr.u32()
				line := sr.u32()
				if sig == 1 {
					nf := sr.u32()
					if nf > uint32(sr.remaining()/4) {
						sr.errorf("inlinee with %d extra files exceeds its subsection", nf)
						break
					}
					sr.skip(int(nf) * 4)
				}
				if _, dup := m.inlinees[id]; !dup {
					m.inlinees[id] = inlineeLine{file, line}
				}
			}
		}
		if sr.err != nil {
			fe := sr.err.(*FormatError)
			fe.Offset += base + int64(ssOff)
			m.err = fe
			return m
		}
	}
	if cr.err != nil {
		fe := cr.err.(*FormatError)
		fe.Offset += base
		m.err = fe
		return m
	}
	sort.SliceStable(blocks, func(i, j int) bool { return blocks[i][0].rva < blocks[j][0].rva })
	for _, bl := range blocks {
		m.lines = append(m.lines, bl...)
	}
	if r.err != nil {
		m.err = r.err
	}
	return m
}

// procAt returns the procedure containing rva.
func (m *modInfo) procAt(rva uint32) (*proc, bool) {
	i := sort.Search(len(m.procs), func(i int) bool { return m.procs[i].rva > rva })
	for i--; i >= 0; i-- {
		p := &m.procs[i]
		if rva-p.rva < p.size {
			return p, true
		}
		if i > 0 && m.procs[i-1].rva != p.rva {
			// Procedures do not nest; only equal starts need a look back.
			break
		}
	}
	return nil, false
}

// lineAt returns the line table row for rva: the last row at or before it
// that is not the end of a block.
func (m *modInfo) lineAt(rva uint32) (lineEntry, bool) {
	t := m.lines
	i := sort.Search(len(t), func(i int) bool {
		return !(t[i].rva < rva || (t[i].rva == rva && t[i].terminal))
	})
	if i == len(t) || t[i].rva > rva {
		if i == 0 || t[i-1].terminal {
			return lineEntry{}, false
		}
		i--
	}
	for i < len(t) && t[i].terminal {
		i++
	}
	if i == len(t) {
		return lineEntry{}, false
	}
	return t[i], true
}
