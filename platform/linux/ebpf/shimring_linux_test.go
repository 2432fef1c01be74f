//go:build linux && (amd64 || arm64)

package ebpf

import (
	"encoding/binary"
	"testing"

	"github.com/rawstack/rawstack/format"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/allocshim"
	"github.com/rawstack/rawstack/platform/linux/internal/linuxtest"
)

// allocCounter counts the allocations and frees a session reports.
type allocCounter struct {
	linuxtest.CountHandler
	allocs, frees int
	bytes         uint64
}

func (h *allocCounter) Alloc(a *platform.Alloc) { h.allocs++; h.bytes += a.Bytes }
func (h *allocCounter) Free(*format.Free)       { h.frees++ }

// ringWriter writes records into a ring as the sampler does (one
// writer, no lock: the test is the only one).
type ringWriter struct{ mem []byte }

func (w ringWriter) put(rec []byte) bool {
	le := binary.LittleEndian
	size := uint64(len(w.mem) - allocshim.RingHeader)
	head, tail := le.Uint64(w.mem[128:]), le.Uint64(w.mem[192:])
	need := uint64(len(rec)) + 8
	off := head & (size - 1)
	if off+need > size {
		pad := size - off
		if head+pad+need-tail > size {
			return false
		}
		le.PutUint32(w.mem[allocshim.RingHeader+off:], uint32(pad))
		le.PutUint32(w.mem[allocshim.RingHeader+off+4:], 1)
		head += pad
		off = 0
	}
	if head+need-tail > size {
		return false
	}
	le.PutUint32(w.mem[allocshim.RingHeader+off:], uint32(need))
	le.PutUint32(w.mem[allocshim.RingHeader+off+4:], 0)
	copy(w.mem[allocshim.RingHeader+off+8:], rec)
	le.PutUint64(w.mem[128:], head+need)
	return true
}

// TestShimRingAllocs pins the shared ring's read path: an allocation's
// stack record (DWARF mode, a stack copy), its block and its free, read
// from the ring and reported, allocate nothing once warm.
func TestShimRingAllocs(t *testing.T) {
	h := &allocCounter{}
	s := replayBPF(h, platform.UnwindDWARF, 7)
	s.bpf.alloc = &allocState{h: h, rate: 512 << 10, pending: map[uint32]*allocCall{}}
	mem := make([]byte, allocshim.RingHeader+1<<16)
	r, err := allocshim.NewRing(mem, 8192, 0, "test.ring", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.bpf.ring = r
	w := ringWriter{mem}
	regs := make([]uint64, bpfNRegs)
	regs[7], regs[8] = 0x7ffe0000, 0x401000 // sp, ip
	alloc := bpfRecord(bpfKindAlloc, 7, 8, 0, 4096, nil, nil, regs, make([]byte, 1024))
	ret := make([]byte, bpfHdrSize)
	free := make([]byte, bpfHdrSize)
	le := binary.LittleEndian
	for _, b := range [][]byte{ret, free} {
		le.PutUint32(b[4:], 7)
		le.PutUint32(b[8:], 8)
		le.PutUint64(b[24:], 0x5000) // the block
	}
	le.PutUint32(ret, bpfKindAllocRet)
	le.PutUint32(free, bpfKindFree)
	round := func() {
		now := uint64(sys.Monotonic())
		for _, b := range [][]byte{alloc, ret, free} {
			le.PutUint64(b[16:], now)
			if !w.put(b) {
				t.Fatal("ring full")
			}
		}
		for s.nextShim(); s.bpf.ringPending; s.nextShim() {
			s.handleShim(s.bpf.ringRec)
			r.Advance()
		}
	}
	round()
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%.1f allocations per allocation, block and free read from the ring, want 0", allocs)
	}
	if h.allocs != 201+1 || h.frees != 201+1 || s.ShimRingRecords() != 3*(201+1) {
		t.Errorf("%d allocations, %d frees, %d records reported; want %d, %d, %d", h.allocs, h.frees, s.ShimRingRecords(), 202, 202, 3*202)
	}
}
