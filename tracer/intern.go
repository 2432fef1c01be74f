package tracer

// stackTable interns stacks: equal PC lists get the same id. Lookups of
// known stacks do not allocate.
type stackTable struct {
	byHash  map[uint64]int32 // hash → first entry with that hash
	entries []stackEntry
	pcs     []uint64 // all interned PCs, back to back
}

type stackEntry struct {
	off, n uint32
	next   int32 // next entry with the same hash, or -1
}

func newStackTable() *stackTable {
	return &stackTable{byHash: make(map[uint64]int32, 1024)}
}

func hashPCs(pcs []uint64) uint64 {
	h := uint64(14695981039346656037)
	for _, pc := range pcs {
		h ^= pc
		h *= 1099511628211
		h ^= h >> 29
	}
	return h
}

// intern returns the id of pcs (ids start at 1) and whether it is new.
func (t *stackTable) intern(pcs []uint64) (uint64, bool) {
	h := hashPCs(pcs)
	i, ok := t.byHash[h]
	last := int32(-1)
	if ok {
		for i >= 0 {
			e := &t.entries[i]
			if equalPCs(t.pcs[e.off:e.off+e.n], pcs) {
				return uint64(i) + 1, false
			}
			last, i = i, e.next
		}
	}
	idx := int32(len(t.entries))
	t.entries = append(t.entries, stackEntry{off: uint32(len(t.pcs)), n: uint32(len(pcs)), next: -1})
	t.pcs = append(t.pcs, pcs...)
	if last >= 0 {
		t.entries[last].next = idx
	} else {
		t.byHash[h] = idx
	}
	return uint64(idx) + 1, true
}

// get returns the PCs of stack id.
func (t *stackTable) get(id uint64) []uint64 {
	e := t.entries[id-1]
	return t.pcs[e.off : e.off+e.n]
}

func (t *stackTable) len() int { return len(t.entries) }

func equalPCs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
