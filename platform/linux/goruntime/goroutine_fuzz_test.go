package goruntime

import (
	"encoding/binary"
	"testing"
)

// FuzzGoReader reads goroutines and labels from arbitrary target memory:
// it must not panic, must keep label sets within the caps, and must give
// equal labels one id.
func FuzzGoReader(f *testing.F) {
	const base = 0x10000
	le := binary.LittleEndian
	// A well-formed g, labelMap and label "k"="v" at base.
	seed := make([]byte, 256)
	le.PutUint64(seed[0:], 0x1000)   // stack.lo
	le.PutUint64(seed[8:], 0x2000)   // stack.hi
	le.PutUint64(seed[16:], 42)      // goid
	le.PutUint64(seed[24:], base+64) // labels → labelMap
	le.PutUint64(seed[64:], base+96) // list
	le.PutUint64(seed[72:], 1)       // len
	le.PutUint64(seed[96:], base+160)
	le.PutUint64(seed[104:], 1)
	le.PutUint64(seed[112:], base+161)
	le.PutUint64(seed[120:], 1)
	seed[160], seed[161] = 'k', 'v'
	f.Add(seed, uint64(0x1800))
	f.Add(seed[:40], uint64(0x1800))
	f.Fuzz(func(t *testing.T, mem []byte, sp uint64) {
		read := func(pid uint32, addr uint64, buf []byte) bool {
			if addr < base || addr-base > uint64(len(mem)) || uint64(len(buf)) > uint64(len(mem))-(addr-base) {
				return false
			}
			copy(buf, mem[addr-base:])
			return true
		}
		gr := newGoReader(read, func(uint32) string { return "" })
		gr.procs[1] = &goProc{layout: &fakeLayout, gbuf: make([]byte, fakeLayout.span), sets: map[uint64]labelEntry{}}
		_, set, fresh := gr.goroutine(1, base, sp)
		if len(fresh) > maxLabels {
			t.Fatalf("%d labels", len(fresh))
		}
		for _, l := range fresh {
			if len(l.Key) > maxLabelBytes || len(l.Value) > maxLabelBytes {
				t.Fatalf("label of %d+%d bytes", len(l.Key), len(l.Value))
			}
		}
		if set != 0 && fresh == nil && int(set) > len(gr.sets) {
			t.Fatalf("set %d of %d", set, len(gr.sets))
		}
		// The same memory again: the same answer, from the cache.
		_, set2, fresh2 := gr.goroutine(1, base, sp)
		if set2 != set || fresh2 != nil {
			t.Fatalf("second read: set %d (fresh %v), first %d", set2, fresh2, set)
		}
	})
}

// fakeLayout is a g of {stack.lo, stack.hi, goid, labels} and labels of
// two strings, as the tests lay them out.
var fakeLayout = goLayout{stackLo: 0, stackHi: 8, goid: 16, labels: 24, span: 32, listOff: 0, labelSize: 32, keyOff: 0, valueOff: 16, hasLabels: true}
