package snapshot

import (
	"debug/elf"
	"encoding/binary"
	"sort"
	"sync"

	"github.com/rawstack/rawstack/arch"
)

// Lazy unwind tables. Parsing all of a large library's .eh_frame (libc:
// ~3700 FDEs, 28000 rows) takes longer than stopping a hundred threads, and
// a snapshot needs a few dozen FDEs. For a file whose .eh_frame_hdr holds
// the usual sorted search table, the unwinder asks [lazyEH.rule] for the
// rule at each pc it meets: the search table (read in place from the
// mapped file) names the FDE, and arch parses that one entry
// (arch.Sections.EHFrameFDEs) where it lies in the section, so pc-relative
// pointers decode unchanged. Parsed FDEs are kept for the next snapshot
// that shares the TableCache.

// lazyMinSize is the .eh_frame size above which a file is loaded lazily
// (ld.so's 13 KiB already takes a millisecond to parse whole).
const lazyMinSize = 4 << 10

type lazyEH struct {
	sections arch.Sections // the whole .eh_frame, unmodified
	// hdr is .eh_frame_hdr's search table, read in place: count entries
	// of (FDE start pc, FDE address), 32-bit offsets from hdrAddr, sorted
	// by pc.
	hdr     []byte
	hdrAddr uint64
	count   int

	mu   sync.Mutex
	fdes map[uint32]*arch.Table // by FDE offset; nil: the FDE did not parse
}

// newLazyEH returns the lazy form of f's unwind info, or nil when f needs
// the full parse (small, has .debug_frame, or an unusual .eh_frame_hdr).
// data returns a section's bytes (a slice of the mapped file where it is
// mapped); the lazy table keeps them.
func newLazyEH(f *elf.File, a arch.Arch, path string, data func(*elf.Section) ([]byte, error)) *lazyEH {
	eh, hdr := f.Section(".eh_frame"), f.Section(".eh_frame_hdr")
	if eh == nil || hdr == nil || eh.Type == elf.SHT_NOBITS || hdr.Type == elf.SHT_NOBITS ||
		eh.Size < lazyMinSize || eh.Size > 256<<20 || hdr.Size > 64<<20 || f.Section(".debug_frame") != nil {
		return nil
	}
	ehData, err1 := data(eh)
	hdrData, err2 := data(hdr)
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
	// The table is searched in place: its entries are checked as a
	// lookup reads them, not all up front (libc has thousands). Its pages
	// and those of .eh_frame are faulted in now, while the target's
	// threads are still being stopped, rather than during the unwind.
	faultIn(hdrData)
	faultIn(ehData)
	return &lazyEH{
		sections: arch.Sections{File: path, Arch: a, EHFrame: ehData, EHFrameAddr: eh.Addr, EHFrameHdrAddr: hdr.Addr},
		hdr:      hdrData[off : off+int(count)*8],
		hdrAddr:  hdr.Addr,
		count:    int(count),
		fdes:     map[uint32]*arch.Table{},
	}
}

// entry returns the link-time start pc of search table entry i and its
// FDE's address.
func (l *lazyEH) entry(i int) (pc, fde uint64) {
	e := l.hdr[i*8:]
	le := binary.LittleEndian
	return l.hdrAddr + uint64(int64(int32(le.Uint32(e)))), l.hdrAddr + uint64(int64(int32(le.Uint32(e[4:]))))
}

// fdeFor returns the offset of the FDE whose range may hold the link-time
// address pc. A table that is not sorted where the search reads it, or
// points outside .eh_frame, gives no FDE.
func (l *lazyEH) fdeFor(pc uint64) (uint32, bool) {
	i := sort.Search(l.count, func(i int) bool { p, _ := l.entry(i); return p > pc })
	if i == 0 {
		return 0, false
	}
	start, fde := l.entry(i - 1)
	if i < l.count {
		if next, _ := l.entry(i); next < start {
			return 0, false
		}
	}
	eh := l.sections.EHFrameAddr
	if fde < eh || fde-eh >= uint64(len(l.sections.EHFrame)) {
		return 0, false
	}
	return uint32(fde - eh), true
}

// rule returns the rule at the link-time address pc, parsing its FDE the
// first time one is asked for. It is safe for concurrent use.
func (l *lazyEH) rule(pc uint64) arch.Rule {
	off, ok := l.fdeFor(pc)
	if !ok {
		return arch.Rule{}
	}
	l.mu.Lock()
	t, ok := l.fdes[off]
	if !ok {
		s := l.sections
		s.EHFrameFDEs = []int{int(off)}
		t, _ = arch.NewTable(s)
		if t != nil && t.FDEs == 0 {
			t = nil
		}
		l.fdes[off] = t
	}
	l.mu.Unlock()
	if t == nil {
		return arch.Rule{}
	}
	return t.Lookup(pc) // CFANone past the FDE's end
}

// faultInSink keeps faultIn's reads from being optimized away.
var faultInSink byte

// faultIn reads a byte of each page of b.
func faultIn(b []byte) {
	var x byte
	for i := 0; i < len(b); i += 4096 {
		x += b[i]
	}
	faultInSink = x
}
