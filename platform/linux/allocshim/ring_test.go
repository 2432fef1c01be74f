package allocshim

import (
	"encoding/binary"
	"errors"
	"testing"
)

// ringOf returns a ring of 64 KiB of records whose first bytes are data
// and whose head is head, as a sampler might have left it.
func ringOf(t testing.TB, data []byte, head uint64) *Ring {
	mem := make([]byte, RingHeader+minRingSize)
	r, err := NewRing(mem, 8192, 0, "fuzz.ring", nil)
	if err != nil {
		t.Fatal(err)
	}
	copy(mem[RingHeader:], data)
	binary.LittleEndian.PutUint64(mem[offHead:], head)
	return r
}

// record appends a record prefix and payload (kind 0) or padding (1).
func record(b []byte, payload []byte, pad bool) []byte {
	var p [8]byte
	binary.LittleEndian.PutUint32(p[:], uint32(8+len(payload)))
	if pad {
		binary.LittleEndian.PutUint32(p[4:], 1)
	}
	return append(append(b, p[:]...), payload...)
}

// TestRingRecords: records come back in order, padding is skipped, the
// tail follows what was read, and a prefix no sampler writes skips what
// was written with an error that names the ring and the offset.
func TestRingRecords(t *testing.T) {
	var b []byte
	b = record(b, make([]byte, 48), false)
	b = record(b, make([]byte, 16), true)
	b = record(b, make([]byte, 184+64), false)
	r := ringOf(t, b, uint64(len(b)))
	var got []int
	for {
		rec, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, len(rec))
		r.Advance()
	}
	if len(got) != 2 || got[0] != 48 || got[1] != 248 {
		t.Errorf("records of %v bytes, want [48 248]", got)
	}
	if tail := binary.LittleEndian.Uint64(r.mem[offTail:]); tail != uint64(len(b)) {
		t.Errorf("tail %d, want %d", tail, len(b))
	}
	bad := record(nil, make([]byte, 48), false)
	binary.LittleEndian.PutUint32(bad, 1<<20)
	r = ringOf(t, bad, uint64(len(bad)))
	if _, ok, err := r.Next(); ok || !errors.Is(err, ErrRingCorrupt) {
		t.Fatalf("a record longer than the ring: %v, %v", ok, err)
	} else {
		t.Log(err)
	}
	if _, ok, err := r.Next(); ok || err != nil {
		t.Errorf("after a corrupt prefix: %v, %v; want the ring empty", ok, err)
	}
}

// FuzzRing: whatever a target writes into the ring (it is the target's
// memory), Next returns records inside it, never more than was written,
// and ends. Seeded with records the sampler wrote for allocload
// (testdata/fuzz/FuzzRing/allocload) and these.
func FuzzRing(f *testing.F) {
	var b []byte
	b = record(b, make([]byte, 48), false)
	b = record(b, make([]byte, 184+1024), false)
	b = record(b, make([]byte, 48), false)
	f.Add(b, uint64(len(b)))
	f.Add(record(nil, make([]byte, 24), true), uint64(32))
	f.Add([]byte{}, uint64(1<<40))
	f.Fuzz(func(t *testing.T, data []byte, head uint64) {
		if len(data) > minRingSize {
			data = data[:minRingSize]
		}
		r := ringOf(t, data, head)
		var read uint64
		for i := 0; i < minRingSize/8+1; i++ {
			rec, ok, err := r.Next()
			if err != nil || !ok {
				return
			}
			read += uint64(len(rec)) + 8
			if read > head {
				t.Fatalf("read %d bytes of records, %d written", read, head)
			}
			r.Advance()
		}
		t.Fatalf("Next did not end")
	})
}
