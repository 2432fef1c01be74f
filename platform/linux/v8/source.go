package v8

import (
	"encoding/binary"
	"sort"
	"unicode/utf16"
	"unicode/utf8"
)

// sourcePosition is V8's SourcePosition (codegen/source-position.h): bit
// 0 says external (a position in another file, which the reader does not
// name), bits 1–30 the script offset plus one (0: none), bits 31–46 the
// inlining id plus one (0: not inlined).
type sourcePosition uint64

func (p sourcePosition) external() bool    { return p&1 != 0 }
func (p sourcePosition) inliningID() int   { return int(p >> 31 & 0xffff) }
func (p sourcePosition) scriptOffset() int { return int(p>>1&(1<<30-1)) - 1 }

// decodePosition returns the source position of the last entry of a
// source position table at or before offset off of its code (machine code
// or bytecode), 0 when there is none. The table (codegen/source-position-
// table.cc) is a list of entries, each a code offset delta (negated minus
// one for an entry that is not a statement) and a position delta, both
// zigzag LEB128, from a first entry at code offset -1, position 0.
func decodePosition(t []byte, off uint64) sourcePosition {
	code, pos := int64(-1), int64(0)
	for len(t) > 0 {
		d, k := binary.Varint(t)
		if k <= 0 {
			return 0
		}
		t = t[k:]
		if d < 0 {
			d = -d - 1
		}
		code += d
		if code > int64(off) {
			break
		}
		dp, k := binary.Varint(t)
		if k <= 0 {
			return 0
		}
		t = t[k:]
		pos += dp
	}
	return sourcePosition(pos)
}

// lineOf returns the 1-based line of position pos in function s's script,
// 0 when unknown.
func (r *Reader) lineOf(p *proc, pid uint32, s *sfiInfo, pos sourcePosition) uint32 {
	off := pos.scriptOffset()
	if s.src == nil || pos.external() || off < 0 {
		return lineUnknown
	}
	ends := s.src.ends(r, p, pid)
	if ends == nil || uint32(off) > ends[len(ends)-1] {
		// Past the script's last line end: the table is not this
		// script's (or the position is not), and a line past it would be
		// a wrong one.
		return lineUnknown
	}
	i := sort.Search(len(ends), func(i int) bool { return ends[i] >= uint32(off) })
	return uint32(i + 1)
}

// script returns the Script at ptr (tagged), taken from the cache while
// its name and source pointers read the same.
func (r *Reader) script(p *proc, pid uint32, ptr uint64) *scriptInfo {
	l := p.l
	ptr = r.current(p, pid, ptr)
	n := max(l.scriptName, l.scriptSource, l.scriptLineEnds) + 8
	b := make([]byte, n)
	if !r.read(pid, ptr-heapObjectTag, b) {
		return nil
	}
	name, src, ends := le64(b, l.scriptName), le64(b, l.scriptSource), le64(b, l.scriptLineEnds)
	if s := p.srcs[ptr]; s != nil && s.name == name && s.source == src {
		return s
	}
	s := &scriptInfo{ptr: ptr, name: name, source: src, lineEndsPtr: ends}
	if t := r.typeOf(p, pid, name); isHeap(name) && t < l.firstNonString {
		s.file, _ = r.str(p, pid, name, t, maxName, 0)
	}
	if len(p.srcs) >= maxCodes {
		clear(p.srcs)
	}
	p.srcs[ptr] = s
	return s
}

// ends returns the offsets of the script's line ends, counted in its
// source; when the source cannot be read (an external string), its
// line_ends array if V8 computed one that passes the checks below.
func (s *scriptInfo) ends(r *Reader, p *proc, pid uint32) []uint32 {
	if s.tried {
		return s.lineEnds
	}
	s.tried = true
	l := p.l
	// A Script read from a pointer that a compaction since made stale
	// still names its source's old copy, whose map word forwards.
	source := r.current(p, pid, s.source)
	t := r.typeOf(p, pid, source)
	if t == noType && isHeap(source) {
		// Unread, not a type: when a failed read gave type 0 (a
		// two-byte string) a one-byte source was read two characters
		// at a time, and every line of the run was 1 (one node run in
		// ten).
		s.retry()
		return nil
	}
	if isHeap(source) && t < l.firstNonString && t&l.strReprMask != l.strExternal {
		// The source, checked to have stayed in place while it was
		// read (below).
		before, ok1 := r.strStamp(p, pid, source)
		src, ok := r.str16(p, pid, source, t, maxSource, 0)
		after, ok2 := r.strStamp(p, pid, source)
		w := r.tmp[:8]
		if !ok1 || !ok2 || before != after || !r.read(pid, r.current(p, pid, s.ptr)-heapObjectTag+l.scriptSource, w) ||
			le64(w, 0) != s.source && le64(w, 0) != source {
			// The process runs on while it is read: a string the
			// garbage collector moved meanwhile (its old copy's map
			// word now forwards) gave other characters, and every
			// line of the run a wrong one. Read again at a later
			// sample, a few times.
			s.retry()
			return nil
		}
		if ok {
			ends := []uint32{}
			for i, c := range src {
				if c == '\n' || c == '\r' && (i+1 == len(src) || src[i+1] != '\n') {
					ends = append(ends, uint32(i))
				}
			}
			s.lineEnds = append(ends, uint32(len(src)))
			return s.lineEnds
		}
	}
	// An external source's data pointer is the embedder's, and was seen
	// to give other bytes: V8's own count, if any.
	if isHeap(s.lineEndsPtr) && r.typeOf(p, pid, s.lineEndsPtr) == l.typeFixedArray {
		// An empty array is no count (V8 has not counted them yet): a
		// script has at least one line end.
		if a, ok := r.fixedArray(p, pid, s.lineEndsPtr, maxLineEnds); ok && len(a) > 0 {
			ends := make([]uint32, 0, len(a))
			for _, v := range a {
				if !isSMI(v) || smi(v) < 0 || len(ends) > 0 && uint32(smi(v)) <= ends[len(ends)-1] {
					return nil
				}
				ends = append(ends, uint32(smi(v)))
			}
			// The last line ends at the source's end (V8 counts the
			// ending line): an array that does not is not this
			// script's line ends.
			if st, ok := r.strStamp(p, pid, source); ok && t < l.firstNonString && (uint64(ends[len(ends)-1]) == st[1] || uint64(ends[len(ends)-1])+1 == st[1]) {
				s.lineEnds = ends
				return ends
			}
		}
	}
	return nil
}

// current returns where the heap object at ptr (tagged) is now: the
// copy a garbage collection moved an object away from holds the new
// address, untagged, in its map word (V8's MapWord::FromForwardingAddress
// without pointer compression); followed a few times.
func (r *Reader) current(p *proc, pid uint32, ptr uint64) uint64 {
	w := r.tmp[:8]
	for i := 0; i < 4 && isHeap(ptr); i++ {
		if !r.read(pid, ptr-heapObjectTag+p.l.mapOff, w) {
			return ptr
		}
		m := le64(w, 0)
		if isHeap(m) || m <= 0xffff || m&7 != 0 {
			return ptr
		}
		ptr = m + heapObjectTag
	}
	return ptr
}

// maxUnstable caps the reads of a script's source that failed or found
// it moving.
const maxUnstable = 16

// retry has the script's line ends looked for again at a later sample,
// up to maxUnstable times.
func (s *scriptInfo) retry() {
	if s.unstable++; s.unstable < maxUnstable {
		s.tried = false
	}
}

// strStamp returns what identifies the String at ptr (tagged) as it is
// now: its map word and length (an object the garbage collector moved
// has a forwarding address in its old copy's map word).
func (r *Reader) strStamp(p *proc, pid uint32, ptr uint64) ([2]uint64, bool) {
	w := r.tmp[:8]
	if !isHeap(ptr) || !r.read(pid, ptr-heapObjectTag+p.l.mapOff, w) {
		return [2]uint64{}, false
	}
	m := le64(w, 0)
	if !r.read(pid, ptr-heapObjectTag+p.l.strLength, w[:4]) {
		return [2]uint64{}, false
	}
	return [2]uint64{m, uint64(binary.LittleEndian.Uint32(w[:4]))}, true
}

// str reads the String at ptr (tagged) of instance type t as UTF-8.
func (r *Reader) str(p *proc, pid uint32, ptr uint64, t uint16, limit int, depth int) (string, bool) {
	u, ok := r.str16(p, pid, ptr, t, limit, depth)
	if !ok {
		return "", false
	}
	b := make([]byte, 0, len(u))
	for _, c := range utf16.Decode(u) {
		b = utf8.AppendRune(b, c)
	}
	return string(b), true
}

// uncachedExternal is V8's kUncachedExternalStringMask: an external
// string whose data pointer is not cached in the object.
const uncachedExternal = 1 << 4

// str16 reads the String at ptr (tagged) of instance type t as UTF-16
// code units (V8's string positions count them), at most limit of them,
// following cons, thin and sliced strings to depth 16.
func (r *Reader) str16(p *proc, pid uint32, ptr uint64, t uint16, limit int, depth int) ([]uint16, bool) {
	l := p.l
	if depth > 16 || t >= l.firstNonString {
		return nil, false
	}
	obj := ptr - heapObjectTag
	w := r.tmp[:8]
	if !r.read(pid, obj+l.strLength, w[:4]) {
		return nil, false
	}
	n := int(int32(binary.LittleEndian.Uint32(w[:4])))
	if n < 0 || n > limit {
		return nil, false
	}
	oneByte := t&l.strEncodingMask == l.strOneByte
	chars := func(at uint64) ([]uint16, bool) {
		size := n
		if !oneByte {
			size *= 2
		}
		b := make([]byte, size)
		if size > 0 && !r.read(pid, at, b) {
			return nil, false
		}
		u := make([]uint16, n)
		for i := range u {
			if oneByte {
				u[i] = uint16(b[i])
			} else {
				u[i] = binary.LittleEndian.Uint16(b[2*i:])
			}
		}
		return u, true
	}
	ptrAt := func(off uint64) (uint64, uint16, bool) {
		if !r.read(pid, obj+off, w) {
			return 0, 0, false
		}
		v := le64(w, 0)
		return v, r.typeOf(p, pid, v), isHeap(v)
	}
	switch t & l.strReprMask {
	case l.strSeq:
		return chars(obj + l.seqChars)
	case l.strExternal:
		if t&uncachedExternal != 0 || !r.read(pid, obj+l.externalResource+8, w) {
			return nil, false
		}
		return chars(le64(w, 0))
	case l.strCons:
		a, ta, ok1 := ptrAt(l.consFirst)
		b, tb, ok2 := ptrAt(l.consSecond)
		if !ok1 || !ok2 {
			return nil, false
		}
		first, ok := r.str16(p, pid, a, ta, limit, depth+1)
		if !ok {
			return nil, false
		}
		second, ok := r.str16(p, pid, b, tb, limit-len(first), depth+1)
		if !ok || len(first)+len(second) != n {
			return nil, false
		}
		return append(first, second...), true
	case l.strThin:
		a, ta, ok := ptrAt(l.thinActual)
		if !ok {
			return nil, false
		}
		return r.str16(p, pid, a, ta, limit, depth+1)
	case l.strSliced:
		a, ta, ok := ptrAt(l.slicedParent)
		if !ok || !r.read(pid, obj+l.slicedOff, w) || !isSMI(le64(w, 0)) {
			return nil, false
		}
		off := int(smi(le64(w, 0)))
		parent, ok := r.str16(p, pid, a, ta, maxSource, depth+1)
		if !ok || off < 0 || off+n > len(parent) {
			return nil, false
		}
		return parent[off : off+n], true
	}
	return nil, false
}
