package pdb

import (
	"sort"
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

// typeStream is the TPI or IPI stream with an index of record offsets,
// built on first use by one pass over the records.
type typeStream struct {
	b       []byte
	stream  int
	first   uint32   // first type index (0x1000)
	offsets []uint32 // record offsets, by index - first
}

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
	t := &typeStream{stream: stream}
	*pt = t
	if stream >= f.msf.numStreams() {
		return t, nil
	}
	b, err := f.msf.stream(stream)
	if err != nil {
		return t, err
	}
	if len(b) == 0 {
		return t, nil
	}
	r := newReader(b, f.name, stream)
	r.u32() // version
	hdrSize := r.u32()
	t.first = r.u32()
	end := r.u32()
	recBytes := r.u32()
	if r.err != nil {
		return t, r.err
	}
	if hdrSize < 56 || uint64(hdrSize)+uint64(recBytes) > uint64(len(b)) || end < t.first {
		r.errorf("type stream header (size %d, %d record bytes) does not fit the stream of %d bytes", hdrSize, recBytes, len(b))
		return t, r.err
	}
	n := end - t.first
	if n > recBytes/4 {
		r.errorf("%d type records cannot fit in %d bytes", n, recBytes)
		return t, r.err
	}
	t.b = b
	t.offsets = make([]uint32, 0, n)
	off := hdrSize
	limit := hdrSize + recBytes
	for off+4 <= limit && uint32(len(t.offsets)) < n {
		l := uint32(le16(b[off:]))
		if l < 2 || off+2+l > limit {
			r.off = int(off)
			r.errorf("bad type record length %d", l)
			return t, r.err
		}
		t.offsets = append(t.offsets, off)
		off += 2 + l
	}
	return t, nil
}

// record returns the kind and data of type index ti.
func (t *typeStream) record(ti uint32) (uint16, []byte, bool) {
	if ti < t.first || ti-t.first >= uint32(len(t.offsets)) {
		return 0, nil, false
	}
	off := t.offsets[ti-t.first]
	l := uint32(le16(t.b[off:]))
	rec := t.b[off+2 : off+2+l]
	return le16(rec), rec[2:], true
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

// publics is the address-sorted table of S_PUB32 records.
type publics struct {
	rvas  []uint32
	names []string
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
	type pub struct {
		sect uint16
		off  uint32
		name string
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
		p.names = append(p.names, cstr(d[10:]))
	}
	if !sort.SliceIsSorted(p.rvas, func(i, j int) bool { return p.rvas[i] < p.rvas[j] }) {
		idx := make([]int, len(p.rvas))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(i, j int) bool { return p.rvas[idx[i]] < p.rvas[idx[j]] })
		rv := make([]uint32, len(idx))
		nm := make([]string, len(idx))
		for k, i := range idx {
			rv[k], nm[k] = p.rvas[i], p.names[i]
		}
		p.rvas, p.names = rv, nm
	}
	return p, nil
}

// at returns the last public symbol at or before rva.
func (p *publics) at(rva uint32) (uint32, string, bool) {
	i := sort.Search(len(p.rvas), func(i int) bool { return p.rvas[i] > rva }) - 1
	if i < 0 {
		return 0, "", false
	}
	return p.rvas[i], p.names[i], true
}
