//go:build linux && (amd64 || arm64)

package ebpf

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rawstack/rawstack/format"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/internal/linuxtest"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// replayBPF returns a session that takes BPF records without programs
// behind it, as the eBPF back end's reader would hand them over.
func replayBPF(h platform.Handler, unwind platform.UnwindMode, pid uint32) *Session {
	s := newSession(platform.Config{Unwind: unwind, Backend: platform.BackendEBPF, OffCPU: true}, h)
	s.bpf.offPending = map[uint32]*offStack{}
	s.SetKernel(true)
	s.AddProcess(pid, "x")
	return s
}

// TestBPFRecordPath: an on-CPU record becomes a sample with its kernel
// frames; an off-CPU stack is held until the thread's return record and
// then reported with the time it left and the nanoseconds it was away; a
// return record with no stack (lost) reports nothing.
func TestBPFRecordPath(t *testing.T) {
	h := &linuxtest.RawHandler{}
	s := replayBPF(h, platform.UnwindFP, 7)
	now := uint64(sys.Monotonic())
	s.handleBPF(linuxtest.SampleRecord(bpfKindCPU, 7, 8, now, 1e6, []uint64{0xffffffff81000010}, []uint64{0x401000, 0x401100}, nil, nil))
	if h.Samples != 1 || h.Last.Flags&format.SampleKernel == 0 || len(h.Last.PCs) != 3 || h.Last.Weight != 1e6 || h.Last.Tid != 8 {
		t.Fatalf("on-CPU sample %+v (%d samples)", h.Last, h.Samples)
	}
	s.handleBPF(linuxtest.SampleRecord(bpfKindOffCPU, 7, 8, now+10, 0, []uint64{0xffffffff81000020}, []uint64{0x401200}, nil, nil))
	if h.Samples != 1 {
		t.Fatal("an off-CPU stack was reported before its thread came back")
	}
	on := make([]byte, bpfHdrSize)
	binary.LittleEndian.PutUint32(on, bpfKindOnCPU)
	binary.LittleEndian.PutUint32(on[4:], 7)
	binary.LittleEndian.PutUint32(on[8:], 8)
	binary.LittleEndian.PutUint64(on[16:], now+10)
	binary.LittleEndian.PutUint64(on[24:], 5e8)
	s.handleBPF(on)
	if h.Samples != 2 || h.Last.Flags&format.SampleOffCPU == 0 || h.Last.Weight != 5e8 || h.Last.Time != int64(now+10) || len(h.Last.PCs) != 2 {
		t.Fatalf("off-CPU sample %+v", h.Last)
	}
	s.handleBPF(on) // no stack pending now
	if h.Samples != 2 {
		t.Fatal("a return record without its stack made a sample")
	}
	bad := linuxtest.SampleRecord(bpfKindCPU, 7, 8, now+20, 1e6, nil, []uint64{0x401000}, nil, nil)
	s.handleBPF(bad[:len(bad)-4]) // its frame counts do not match its size
	if h.Samples != 2 || h.NLost != 1 || len(h.Reasons) != 1 {
		t.Fatalf("a malformed record: %d samples, %d lost (%v)", h.Samples, h.NLost, h.Reasons)
	}
}

// TestBPFRecordAllocs pins the capture path: decoding, unwinding (DWARF
// mode, stack copy) and reporting an on-CPU record, and pairing an
// off-CPU stack with its return, allocate nothing once warm.
func TestBPFRecordAllocs(t *testing.T) {
	h := &linuxtest.CountHandler{}
	s := replayBPF(h, platform.UnwindDWARF, 7)
	regs := make([]uint64, bpfNRegs)
	regs[7], regs[8] = 0x7ffe0000, 0x401000 // sp, ip
	stack := make([]byte, 4096)
	cpu := linuxtest.SampleRecord(bpfKindCPU, 7, 8, 0, 1e6, []uint64{0xffffffff81000010}, nil, regs, stack)
	off := linuxtest.SampleRecord(bpfKindOffCPU, 7, 8, 0, 0, []uint64{0xffffffff81000020}, nil, regs, stack)
	on := make([]byte, bpfHdrSize)
	binary.LittleEndian.PutUint32(on, bpfKindOnCPU)
	binary.LittleEndian.PutUint32(on[8:], 8)
	stamp := func() {
		now := uint64(sys.Monotonic())
		binary.LittleEndian.PutUint64(cpu[16:], now)
		binary.LittleEndian.PutUint64(off[16:], now)
		binary.LittleEndian.PutUint64(on[16:], now)
	}
	stamp()
	s.handleBPF(cpu)
	allocs := testing.AllocsPerRun(200, func() {
		stamp()
		s.handleBPF(cpu)
		s.handleBPF(off)
		s.handleBPF(on)
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per on-CPU + off-CPU record pair, want 0", allocs)
	}
	if h.Samples < 400 {
		t.Errorf("%d samples reported", h.Samples)
	}
}

// FuzzDecodeBPF: any bytes either decode into counts that fit the record
// or are rejected, and a session takes them without panicking.
func FuzzDecodeBPF(f *testing.F) {
	regs := make([]uint64, bpfNRegs)
	f.Add(linuxtest.SampleRecord(bpfKindCPU, 1, 1, 5, 1, []uint64{0xffffffff81000010}, []uint64{0x401000}, nil, nil))
	f.Add(linuxtest.SampleRecord(bpfKindCPU, 1, 1, 5, 1, nil, nil, regs, make([]byte, 64)))
	f.Add(linuxtest.SampleRecord(bpfKindOffCPU, 1, 1, 5, 1, []uint64{1, 2}, nil, regs, make([]byte, 16)))
	f.Add(make([]byte, bpfHdrSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r tracking.Record
		r.PCs = make([]uint64, 0, 1024)
		r.NUserRegs, r.UserRegsMask = bpfNRegs, 0xff01ff
		if _, err := tracking.DecodeSampleRecord(b, &r); err == nil {
			if len(r.PCs) > 254 || len(r.UserStack) > bpfMaxStack {
				t.Fatalf("decoded %d frames and %d stack bytes", len(r.PCs), len(r.UserStack))
			}
		} else if !errors.Is(err, tracking.ErrSampleRecord) {
			t.Fatalf("error %v does not wrap tracking.ErrSampleRecord", err)
		}
		s := replayBPF(&linuxtest.CountHandler{}, platform.UnwindDWARF, 1)
		s.handleBPF(b)
	})
}
