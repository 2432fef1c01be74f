package snapshot

import (
	"debug/elf"
	"encoding/binary"
	"sort"

	"github.com/rawstack/rawstack/arch"
)

// Lazy unwind tables. Parsing all of a large library's .eh_frame (libc:
// ~3000 FDEs, 28000 rows) takes longer than stopping a hundred threads, and
// a snapshot needs a few dozen FDEs. For a file whose .eh_frame_hdr holds
// the usual sorted search table, the table handed to arch holds only the
// FDEs the stacks have needed so far: unwindThreads finds each stack's
// first pc whose FDE is missing, adds it and unwinds again. Unneeded FDEs
// are left out of the section arch parses (see [lazyEH.table]); the wanted
// ones keep their offsets, so pc-relative pointers decode unchanged.

// lazyMinSize is the .eh_frame size above which a file is loaded lazily
// (ld.so's 13 KiB already takes a millisecond to parse whole).
const lazyMinSize = 4 << 10

type lazyEH struct {
	sections arch.Sections // the whole .eh_frame, unmodified
	// search is .eh_frame_hdr's table: FDE start pcs (link-time) and the
	// offsets of their FDEs in .eh_frame, sorted by pc.
	pcs    []uint64
	fdeOff []uint32
	wanted map[uint32]bool // FDE offsets in the current table
}

// newLazyEH returns the lazy form of f's unwind info, or nil when f needs
// the full parse (small, has .debug_frame, or an unusual .eh_frame_hdr).
func newLazyEH(f *elf.File, a arch.Arch, path string) *lazyEH {
	eh, hdr := f.Section(".eh_frame"), f.Section(".eh_frame_hdr")
	if eh == nil || hdr == nil || eh.Type == elf.SHT_NOBITS || hdr.Type == elf.SHT_NOBITS ||
		eh.Size < lazyMinSize || eh.Size > 256<<20 || hdr.Size > 64<<20 || f.Section(".debug_frame") != nil {
		return nil
	}
	ehData, err1 := eh.Data()
	hdrData, err2 := hdr.Data()
	if err1 != nil || err2 != nil || len(hdrData) < 12 || hdrData[0] != 1 {
		return nil
	}
	le := binary.LittleEndian
	if f.ByteOrder != le {
		return nil
	}
	// version, eh_frame_ptr encoding, fde_count encoding, table encoding.
	ptrEnc, countEnc, tableEnc := hdrData[1], hdrData[2], hdrData[3]
	size := func(enc byte) int {
		switch enc & 0x0f {
		case 0x03, 0x0b: // udata4, sdata4
			return 4
		case 0x04, 0x0c: // udata8, sdata8
			return 8
		}
		return 0
	}
	ps, cs := size(ptrEnc), size(countEnc)
	if ptrEnc == 0xff || ps == 0 || cs == 0 || countEnc&0x70 != 0 || tableEnc != 0x3b { // table: datarel sdata4
		return nil
	}
	off := 4 + ps
	if len(hdrData) < off+cs {
		return nil
	}
	var count uint64
	if cs == 4 {
		count = uint64(le.Uint32(hdrData[off:]))
	} else {
		count = le.Uint64(hdrData[off:])
	}
	off += cs
	if count > uint64(len(hdrData)-off)/8 {
		return nil
	}
	l := &lazyEH{
		sections: arch.Sections{File: path, Arch: a, EHFrame: ehData, EHFrameAddr: eh.Addr, EHFrameHdrAddr: hdr.Addr},
		pcs:      make([]uint64, count),
		fdeOff:   make([]uint32, count),
		wanted:   map[uint32]bool{},
	}
	for i := uint64(0); i < count; i++ {
		e := hdrData[off+int(i)*8:]
		pc := hdr.Addr + uint64(int64(int32(le.Uint32(e))))
		fde := hdr.Addr + uint64(int64(int32(le.Uint32(e[4:]))))
		if fde < eh.Addr || fde-eh.Addr >= uint64(len(ehData)) || i > 0 && pc < l.pcs[i-1] {
			return nil
		}
		l.pcs[i], l.fdeOff[i] = pc, uint32(fde-eh.Addr)
	}
	return l
}

// fdeFor returns the offset of the FDE whose range may hold the link-time
// address pc.
func (l *lazyEH) fdeFor(pc uint64) (uint32, bool) {
	i := sort.Search(len(l.pcs), func(i int) bool { return l.pcs[i] > pc })
	if i == 0 {
		return 0, false
	}
	return l.fdeOff[i-1], true
}

// table builds the table of the wanted FDEs. It lays them and their CIEs
// out at their original offsets in a section of the original size and
// covers each gap between them with one entry whose CIE pointer is
// invalid, which arch skips: the parse costs what the wanted FDEs cost,
// whatever the size of .eh_frame.
func (l *lazyEH) table() *arch.Table {
	le := binary.LittleEndian
	eh := l.sections.EHFrame
	type span struct{ off, end int }
	entry := func(off int) (span, bool) {
		if off < 0 || off+8 > len(eh) {
			return span{}, false
		}
		n := le.Uint32(eh[off:])
		if n == 0 || n == 0xffffffff || uint64(n) > uint64(len(eh)-off-4) {
			return span{}, false // 64-bit entries are not kept
		}
		return span{off, off + 4 + int(n)}, true
	}
	var spans []span
	for off := range l.wanted {
		fde, ok := entry(int(off))
		if !ok {
			continue
		}
		cie, ok := entry(fde.off + 4 - int(le.Uint32(eh[fde.off+4:])))
		if !ok || cie.end > fde.off {
			continue
		}
		spans = append(spans, fde, cie)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].off < spans[j].off })
	data := make([]byte, len(eh))
	pos := 0
	gap := func(end int) {
		if end-pos >= 8 {
			le.PutUint32(data[pos:], uint32(end-pos-4))
			le.PutUint32(data[pos+4:], 0xffffffff)
		} else {
			copy(data[pos:end], eh[pos:end])
		}
	}
	for _, sp := range spans {
		if sp.off < pos {
			continue // a CIE shared by several FDEs
		}
		gap(sp.off)
		copy(data[sp.off:sp.end], eh[sp.off:sp.end])
		pos = sp.end
	}
	if len(eh)-pos >= 8 {
		gap(len(eh))
	} // else: zeros, a terminator
	s := l.sections
	s.EHFrame = data
	t, _ := arch.NewTable(s) // the gap entries are reported as errors
	return t
}
