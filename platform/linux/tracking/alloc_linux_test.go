//go:build linux

package tracking

import (
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

// ringTracker returns a Tracker of process 7 that records allocations
// in DWARF mode from a shared ring in memory, and a writer of that ring.
func ringTracker(t testing.TB, h platform.Handler) (*Tracker, linuxtest.RingWriter) {
	s := New(platform.Config{Unwind: platform.UnwindDWARF, Alloc: true}, h)
	s.pid = 7
	s.AddProcess(7, "x")
	if err := s.EnableAlloc("test"); err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, allocshim.RingHeader+1<<16)
	r, err := allocshim.NewRing(mem, 8192, 0, "test.ring", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.alloc.ring, s.alloc.ringUsed = r, true
	return s, linuxtest.RingWriter{Mem: mem}
}

// readAllocRing reports every record in the ring, as a back end's
// ReadAll does.
func readAllocRing(s *Tracker) {
	s.BeginAllocRead()
	for {
		if _, ok := s.AllocPending(^uint64(0)); !ok {
			return
		}
		s.ReportAllocRecord()
	}
}

// TestAllocRingPath pins the shared ring's read path: an allocation's
// stack record (a stack copy), its block and its free, read from the
// ring and reported, allocate nothing once warm; a record of a process
// the Tracker does not follow is counted lost, not reported.
func TestAllocRingPath(t *testing.T) {
	h := &allocCounter{}
	s, w := ringTracker(t, h)
	regs := make([]uint64, SampleNRegs)
	regs[7], regs[8] = 0x7ffe0000, 0x401000 // sp, ip
	alloc := linuxtest.SampleRecord(KindAlloc, 7, 8, 0, 4096, nil, nil, regs, make([]byte, 1024))
	ret := linuxtest.SampleHeader(KindAllocRet, 7, 8, 0, 0x5000)
	free := linuxtest.SampleHeader(KindFree, 7, 8, 0, 0x5000)
	round := func() {
		now := uint64(sys.Monotonic())
		for _, b := range [][]byte{alloc, ret, free} {
			putTime(b, now)
			if !w.Put(b) {
				t.Fatal("ring full")
			}
		}
		readAllocRing(s)
	}
	round()
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%.1f allocations per allocation, block and free read from the ring, want 0", allocs)
	}
	if h.allocs != 201+1 || h.frees != 201+1 || s.AllocRingRecords() != 3*(201+1) {
		t.Errorf("%d allocations, %d frees, %d records reported; want %d, %d, %d", h.allocs, h.frees, s.AllocRingRecords(), 202, 202, 3*202)
	}
	lost := h.NLost
	w.Put(linuxtest.SampleHeader(KindFree, 9, 9, uint64(sys.Monotonic()), 0x5000))
	readAllocRing(s)
	if h.frees != 202 || h.NLost != lost+1 {
		t.Errorf("a free of process 9, not followed: %d frees, %d lost; want 202 and %d", h.frees, h.NLost, lost+1)
	}
}

func putTime(b []byte, t uint64) {
	for i := 0; i < 8; i++ {
		b[16+i] = byte(t >> (8 * i))
	}
}

// FuzzAllocRecord: whatever a target writes into the ring as a record,
// the Tracker reports it or counts it lost, without a panic.
func FuzzAllocRecord(f *testing.F) {
	regs := make([]uint64, SampleNRegs)
	f.Add(linuxtest.SampleRecord(KindAlloc, 7, 8, 5, 64, nil, nil, regs, make([]byte, 64)))
	f.Add(linuxtest.SampleRecord(KindAlloc, 7, 8, 5, 64, []uint64{0xffffffff81000000}, []uint64{0x401000}, nil, nil))
	f.Add(linuxtest.SampleHeader(KindAllocRet, 7, 8, 5, 0x5000))
	f.Add(linuxtest.SampleHeader(KindFree, 7, 8, 5, 0x5000))
	f.Fuzz(func(t *testing.T, rec []byte) {
		h := &allocCounter{}
		s, w := ringTracker(t, h)
		if !w.Put(rec) {
			return
		}
		readAllocRing(s)
	})
}
