package tracer

// stackTable interns stacks: equal PC lists get the same id. Lookups of
// known stacks do not allocate.
//
// The table is capped (maxPCs PCs, maxStacks stacks; with the hash index
// about 24 MiB): a program whose stacks rarely repeat would otherwise grow
// the recorder without bound. When a new stack would pass the cap the
// table forgets every stack and starts again; ids keep counting up, so an
// id is never redefined (SPEC §5.3), and a stack seen again is defined
// again under a new id before its first use, in the stream order every
// chunk already follows. The cost is a repeated definition per stack
// still in use after a reset.
type stackTable struct {
	byHash  map[uint64]int32 // hash → first entry with that hash
	entries []stackEntry
	pcs     []uint64 // all interned PCs, back to back
	base    uint64   // ids of entries are base+index+1
	resets  int

	maxPCs, maxStacks int
}

// Default caps of the stack table: 8 MiB of PCs, 256 Ki stacks.
const (
	defaultMaxPCs    = 1 << 20
	defaultMaxStacks = 1 << 18
)

type stackEntry struct {
	off, n uint32
	next   int32 // next entry with the same hash, or -1
}

// newStackTable returns a table capped at maxStacks stacks (and 32 PCs
// a stack on average); 0 means the default caps.
func newStackTable(maxStacks int) *stackTable {
	t := &stackTable{byHash: make(map[uint64]int32, 1024), maxPCs: defaultMaxPCs, maxStacks: defaultMaxStacks}
	if maxStacks > 0 && maxStacks < defaultMaxStacks {
		t.maxStacks, t.maxPCs = maxStacks, min(defaultMaxPCs, 32*maxStacks)
	}
	return t
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
				return t.base + uint64(i) + 1, false
			}
			last, i = i, e.next
		}
	}
	if (len(t.pcs)+len(pcs) > t.maxPCs || len(t.entries) >= t.maxStacks) && len(t.entries) > 0 {
		t.reset()
		last = -1
	}
	idx := int32(len(t.entries))
	t.entries = append(t.entries, stackEntry{off: uint32(len(t.pcs)), n: uint32(len(pcs)), next: -1})
	t.pcs = append(t.pcs, pcs...)
	if last >= 0 {
		t.entries[last].next = idx
	} else {
		t.byHash[h] = idx
	}
	return t.base + uint64(idx) + 1, true
}

// reset forgets every stack; ids go on from where they were.
func (t *stackTable) reset() {
	t.base += uint64(len(t.entries))
	t.entries = t.entries[:0]
	t.pcs = t.pcs[:0]
	clear(t.byHash)
	t.resets++
}

// ids returns the range [first, last] of the ids the table holds now
// (first > last when empty).
func (t *stackTable) ids() (first, last uint64) {
	return t.base + 1, t.base + uint64(len(t.entries))
}

// get returns the PCs of stack id, one of ids().
func (t *stackTable) get(id uint64) []uint64 {
	e := t.entries[id-t.base-1]
	return t.pcs[e.off : e.off+e.n]
}

// len is how many distinct stacks were interned, resets included.
func (t *stackTable) len() int { return int(t.base) + len(t.entries) }

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
