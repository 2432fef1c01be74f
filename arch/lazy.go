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
	mu     sync.Mutex
	p      *sectionParser // over .eh_frame; its builder holds the parsed rows
	search []byte         // .eh_frame_hdr's table: (pc, fde) pairs, datarel sdata4
	hdr    uint64         // .eh_frame_hdr's address, their base
	n      int            // entries in search
	parsed map[int]int32  // search index → index in p.b.fdes, or -1: no usable FDE
	stubs  []Stub
}

// NewLazyTableELF is NewTableELF for a recorder: where f has an
// .eh_frame_hdr search table (and no .debug_frame, whose entries such a
// table does not list), the Table it returns parses each FDE the first
// time an address in it is looked up, and costs until then the bytes of
// .eh_frame and the search table. Otherwise it returns NewTableELF's
// table. Len and Row of a lazy table see only the rows parsed so far.
func NewLazyTableELF(f *elf.File, path string) (*Table, error) {
	var a Arch
	switch f.Machine {
	case elf.EM_X86_64:
		a = AMD64
	case elf.EM_AARCH64:
		a = ARM64
	default:
		return nil, fmt.Errorf("arch: %s: unsupported machine %v", path, f.Machine)
	}
	if f.ByteOrder != binary.LittleEndian || f.Section(".debug_frame") != nil {
		return NewTableELF(f, path)
	}
	eh, ehAddr, hdrData, hdrAddr, ok := lazySections(f)
	if !ok || len(eh) < lazyMinEHFrame {
		return NewTableELF(f, path)
	}
	t, ok := newLazyTable(a, path, eh, ehAddr, hdrData, hdrAddr, pltStubs(f, a))
	if !ok {
		return NewTableELF(f, path)
	}
	return t, nil
}

// lazySections reads .eh_frame and .eh_frame_hdr, by section or, without
// section headers, through PT_GNU_EH_FRAME.
func lazySections(f *elf.File) (eh []byte, ehAddr uint64, hdr []byte, hdrAddr uint64, ok bool) {
	read := func(s *elf.Section) []byte {
		if s == nil || s.Type == elf.SHT_NOBITS || s.Size > maxSection {
			return nil
		}
		d, err := s.Data()
		if err != nil || len(d) > maxSection {
			return nil
		}
		return d
	}
	if es, hs := f.Section(".eh_frame"), f.Section(".eh_frame_hdr"); es != nil && hs != nil {
		eh, hdr = read(es), read(hs)
		return eh, es.Addr, hdr, hs.Addr, eh != nil && hdr != nil
	}
	if f.Section(".eh_frame") != nil {
		return nil, 0, nil, 0, false
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_GNU_EH_FRAME || p.Filesz > maxSection {
			continue
		}
		hdr = make([]byte, p.Filesz)
		if _, err := io.ReadFull(p.Open(), hdr); err != nil {
			return nil, 0, nil, 0, false
		}
		data, addr, hAddr, err := ehFrameFromSegments(f, "")
		if err != nil || data == nil {
			return nil, 0, nil, 0, false
		}
		return data, addr, hdr, hAddr, true
	}
	return nil, 0, nil, 0, false
}

// newLazyTable returns a lazy table over .eh_frame bytes eh at ehAddr
// and .eh_frame_hdr bytes hdr at hdrAddr, or false when the header has no
// usable search table (not datarel sdata4, unsorted, or pointing outside
// .eh_frame).
func newLazyTable(a Arch, path string, eh []byte, ehAddr uint64, hdr []byte, hdrAddr uint64, stubs []Stub) (*Table, bool) {
	h, err := ParseEHFrameHdr(path, hdr, hdrAddr)
	if err != nil || h.tableEnc != peDatarel|peSdata4 || h.EHFrameAddr != ehAddr || h.FDECount == 0 {
		return nil, false
	}
	n := int(h.FDECount) // ParseEHFrameHdr checked that the entries fit
	search := hdr[h.tableOff : h.tableOff+8*n]
	le := binary.LittleEndian
	prev := int64(-1 << 62)
	for i := 0; i < n; i++ {
		pc := int64(int32(le.Uint32(search[8*i:])))
		fde := hdrAddr + uint64(int64(int32(le.Uint32(search[8*i+4:]))))
		if pc < prev || fde < ehAddr || fde-ehAddr >= uint64(len(eh)) {
			return nil, false
		}
		prev = pc
	}
	b := &builder{arch: a, ruleIDs: map[Rule]uint32{}}
	l := &lazyIndex{
		p:      &sectionParser{b: b, file: path, sect: ".eh_frame", data: eh, secAddr: ehAddr, dataAddr: hdrAddr, eh: true, cies: map[int]*cie{}},
		search: search, hdr: hdrAddr, n: n, parsed: map[int]int32{},
		stubs: stubs,
	}
	b.ruleID(Rule{}) // rule 0: none
	return &Table{Arch: a, lazy: l}, true
}

// pc returns search entry i's start address.
func (l *lazyIndex) pc(i int) uint64 {
	return l.hdr + uint64(int64(int32(binary.LittleEndian.Uint32(l.search[8*i:]))))
}

// lookup returns the rule covering the link-time address addr.
func (l *lazyIndex) lookup(addr uint64) Rule {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The last entry starting at or below addr.
	i := sort.Search(l.n, func(i int) bool { return l.pc(i) > addr }) - 1
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

// parse parses the FDE of search entry i and returns its index in the
// builder's FDEs, or -1 when it is malformed or empty.
func (l *lazyIndex) parse(i int) int32 {
	p := l.p
	off := int(l.hdr + uint64(int64(int32(binary.LittleEndian.Uint32(l.search[8*i+4:])))) - p.secAddr)
	_, end, isCIE, id, idOff, body, err := p.header(off)
	if err != nil || isCIE || end <= off+4 || id > uint64(idOff) {
		p.b.skipped++
		return -1
	}
	nf := len(p.b.fdes)
	if err := p.fde(idOff, body, end, idOff-int(id)); err != nil || len(p.b.fdes) == nf {
		p.b.skipped++
		return -1
	}
	return int32(nf)
}

// bytes is the memory a lazy table holds: the unwind sections, and the
// rows and rules parsed so far.
func (l *lazyIndex) bytes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.p.b
	return len(l.p.data) + len(l.search) + cap(b.rows)*int(unsafe.Sizeof(row{})) + cap(b.fdes)*int(unsafe.Sizeof(fdeRows{})) + cap(b.rules)*int(unsafe.Sizeof(Rule{})) + len(l.parsed)*16
}

// counts reports how many FDEs a lazy table has parsed and how many it
// lists.
func (l *lazyIndex) counts() (parsed, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.p.b.fdes), l.n
}
