package pdb

import (
	"fmt"
	"sort"
	"sync"
)

// Type and id record kinds used for names.
const (
	lfClass     = 0x1504
	lfStructure = 0x1505
	lfUnion     = 0x1506
	lfEnum      = 0x1507
	lfInterface = 0x1519
	lfFuncID    = 0x1601
	lfMFuncID   = 0x1602
	lfStringID  = 0x1605
)

// typeStream is the TPI or IPI stream. Records are read on demand: the
// stream's hash stream holds an index of (type index, offset) pairs every
// few kilobytes, so finding a record reads at most one stretch of records
// rather than the whole stream, which can be hundreds of megabytes.
type typeStream struct {
	sr       *streamReader
	first    uint32 // first type index (0x1000)
	end      uint32 // one past the last type index
	recStart uint32 // offset of the first record
	recEnd   uint32 // end of the records
	index    []typeIndexOffset
	mu       sync.Mutex
	cache    map[uint32][]byte // record (kind + data) by type index
}

type typeIndexOffset struct{ ti, off uint32 }

// maxTypeIndexPairs caps the index read from the hash stream.
const maxTypeIndexPairs = 1 << 22

func (f *File) types(stream int) (*typeStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pt := &f.tpi
	if stream == streamIPI {
		pt = &f.ipi
	}
	if *pt != nil {
		return *pt, nil
	}
	t := &typeStream{cache: map[uint32][]byte{}}
	*pt = t
	if stream >= f.msf.numStreams() {
		return t, nil
	}
	sr, err := f.msf.open(stream)
	if err != nil || sr.size < 56 {
		return t, err
	}
	var h [56]byte
	if err := sr.ReadAt(h[:], 0); err != nil {
		return t, err
	}
	hdrSize := le32(h[4:])
	first, end := le32(h[8:]), le32(h[12:])
	recBytes := le32(h[16:])
	hashStream := le16(h[20:])
	idxOff, idxLen := le32(h[40:]), le32(h[44:])
	if hdrSize < 56 || uint64(hdrSize)+uint64(recBytes) > uint64(sr.size) || end < first {
		return t, &FormatError{File: f.name, Stream: stream, Msg: fmt.Sprintf("type stream header (size %d, %d record bytes) does not fit the stream of %d bytes", hdrSize, recBytes, sr.size)}
	}
	t.sr, t.first, t.end, t.recStart, t.recEnd = sr, first, end, hdrSize, hdrSize+recBytes
	// The index of offsets, when the hash stream has a valid one.
	if hs, err := f.msf.open(int(hashStream)); err == nil && hashStream != 0xFFFF && idxLen%8 == 0 &&
		uint64(idxOff)+uint64(idxLen) <= uint64(hs.size) && idxLen/8 <= maxTypeIndexPairs {
		b := make([]byte, idxLen)
		if hs.ReadAt(b, int64(idxOff)) == nil {
			for i := 0; i+8 <= len(b); i += 8 {
				e := typeIndexOffset{le32(b[i:]), le32(b[i+4:])}
				if e.ti < first || e.ti >= end || uint64(e.off)+uint64(hdrSize) >= uint64(t.recEnd) ||
					len(t.index) > 0 && (e.ti <= t.index[len(t.index)-1].ti || e.off <= t.index[len(t.index)-1].off) {
					t.index = nil // not usable: scan from the start instead
					break
				}
				t.index = append(t.index, e)
			}
		}
	}
	return t, nil
}

// maxTypeScan caps how many records one lookup walks past.
const maxTypeScan = 1 << 20

// record returns the kind and data of type index ti.
func (t *typeStream) record(ti uint32) (uint16, []byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.cache[ti]; ok {
		return le16(r), r[2:], true
	}
	if t.sr == nil || ti < t.first || ti >= t.end {
		return 0, nil, false
	}
	cur, off := t.first, t.recStart
	i := sort.Search(len(t.index), func(i int) bool { return t.index[i].ti > ti }) - 1
	if i >= 0 {
		cur, off = t.index[i].ti, t.recStart+t.index[i].off
	}
	var h [4]byte
	for n := 0; n < maxTypeScan; n++ {
		if off+4 > t.recEnd || t.sr.ReadAt(h[:], int64(off)) != nil {
			return 0, nil, false
		}
		l := uint32(le16(h[:]))
		if l < 2 || off+2+l > t.recEnd {
			return 0, nil, false
		}
		if cur == ti {
			r := make([]byte, l)
			if t.sr.ReadAt(r, int64(off)+2) != nil {
				return 0, nil, false
			}
			t.cache[ti] = r
			return le16(r), r[2:], true
		}
		cur++
		off += 2 + l
	}
	return 0, nil, false
}

// numericLeafLen returns the length of the numeric leaf at the start of p.
func numericLeafLen(p []byte) int {
	if len(p) < 2 {
		return len(p)
	}
	v := le16(p)
	if v < 0x8000 {
		return 2
	}
	switch v {
	case 0x8000:
		return 3
	case 0x8001, 0x8002:
		return 4
	case 0x8003, 0x8004, 0x8005:
		return 6
	case 0x8009, 0x800a, 0x8006:
		return 10
	}
	return len(p)
}

// typeName returns the name of a class, structure, union, enum or
// interface type record.
func (t *typeStream) typeName(ti uint32) string {
	kind, d, ok := t.record(ti)
	if !ok {
		return ""
	}
	var rest []byte
	switch kind {
	case lfClass, lfStructure, lfInterface:
		if len(d) < 16 {
			return ""
		}
		rest = d[16:]
		rest = rest[min(len(rest), numericLeafLen(rest)):]
	case lfUnion:
		if len(d) < 8 {
			return ""
		}
		rest = d[8:]
		rest = rest[min(len(rest), numericLeafLen(rest)):]
	case lfEnum:
		if len(d) < 12 {
			return ""
		}
		rest = d[12:]
	default:
		return ""
	}
	return cstr(rest)
}

// idName returns the name of an id record: a function id's name or a
// string id's string.
func (t *typeStream) idName(ti uint32) string {
	kind, d, ok := t.record(ti)
	if !ok {
		return ""
	}
	switch kind {
	case lfFuncID, lfMFuncID:
		if len(d) >= 8 {
			return cstr(d[8:])
		}
	case lfStringID:
		if len(d) >= 4 {
			return cstr(d[4:])
		}
	}
	return ""
}

// inlineeName returns the qualified name of an inlined function: for a
// member function id the class name and "::", for a function id its parent
// scope and "::", then its own name.
func (f *File) inlineeName(id uint32) string {
	ipi, err := f.types(streamIPI)
	if err != nil || ipi == nil {
		return ""
	}
	kind, d, ok := ipi.record(id)
	if !ok {
		return ""
	}
	var q string
	switch kind {
	case lfMFuncID:
		if tpi, err := f.types(streamTPI); err == nil && len(d) >= 4 {
			q = tpi.typeName(le32(d)) + "::"
		}
	case lfFuncID:
		if len(d) >= 4 {
			if scope := le32(d); scope != 0 {
				q = ipi.idName(scope) + "::"
			}
		}
	}
	return q + ipi.idName(id)
}

// publics is the address-sorted table of S_PUB32 records. Only addresses
// and record offsets stay in memory; a name is read from the symbol record
// stream when an address first resolves to it.
type publics struct {
	rvas  []uint32
	offs  []uint32 // record offsets in the symbol record stream
	sr    *streamReader
	names sync.Map // index → name
}

func (f *File) publicSymbols() (*publics, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.publics != nil {
		return f.publics, nil
	}
	p := &publics{}
	f.publics = p
	if f.publicsStream < 0 || f.publicsStream == 0xFFFF || f.symRecStream < 0 || f.symRecStream == 0xFFFF {
		return p, nil
	}
	hb, err := f.msf.stream(f.publicsStream)
	if err != nil {
		return p, err
	}
	if p.sr, err = f.msf.open(f.symRecStream); err != nil {
		return p, err
	}
	// One sequential read of the records, dropped after the addresses
	// are taken out.
	recs, err := f.msf.stream(f.symRecStream)
	if err != nil {
		return p, err
	}
	r := newReader(hb, f.name, f.publicsStream)
	symHash := r.u32()
	addrMap := r.u32()
	r.skip(20)
	r.skip(int(min(symHash, uint32(r.remaining()+1))))
	am := r.bytes(int(min(addrMap, uint32(r.remaining()+1))))
	if r.err != nil {
		return p, r.err
	}
	// The address map is sorted by section and offset already.
	for i := 0; i+4 <= len(am); i += 4 {
		o := le32(am[i:])
		if uint64(o)+4 > uint64(len(recs)) {
			continue
		}
		l := uint32(le16(recs[o:]))
		if l < 12 || uint64(o)+2+uint64(l) > uint64(len(recs)) || le16(recs[o+2:]) != sPub32 {
			continue
		}
		d := recs[o+4 : o+2+l]
		rva, ok := f.sectRVA(le16(d[8:]), le32(d[4:]))
		if !ok {
			continue
		}
		p.rvas = append(p.rvas, rva)
		p.offs = append(p.offs, o)
	}
	if !sort.SliceIsSorted(p.rvas, func(i, j int) bool { return p.rvas[i] < p.rvas[j] }) {
		idx := make([]int, len(p.rvas))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(i, j int) bool { return p.rvas[idx[i]] < p.rvas[idx[j]] })
		rv := make([]uint32, len(idx))
		of := make([]uint32, len(idx))
		for k, i := range idx {
			rv[k], of[k] = p.rvas[i], p.offs[i]
		}
		p.rvas, p.offs = rv, of
	}
	return p, nil
}

// name returns the name of public i.
func (p *publics) name(i int) string {
	if v, ok := p.names.Load(i); ok {
		return v.(string)
	}
	var h [2]byte
	o := int64(p.offs[i])
	if p.sr.ReadAt(h[:], o) != nil {
		return ""
	}
	l := int(le16(h[:]))
	rec := make([]byte, l)
	if l < 12 || p.sr.ReadAt(rec, o+2) != nil {
		return ""
	}
	n := cstr(rec[12:]) // kind, flags, offset, segment, then the name
	p.names.Store(i, n)
	return n
}

// at returns the index of the last public symbol at or before rva, or -1.
func (p *publics) at(rva uint32) int {
	return sort.Search(len(p.rvas), func(i int) bool { return p.rvas[i] > rva }) - 1
}
