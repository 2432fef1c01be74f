package tracking

import (
	"encoding/binary"
	"math/bits"
	"testing"

	"github.com/rawstack/rawstack/arch"
)

// dwarfSampleRecord builds a PERF_RECORD_SAMPLE with a callchain, then
// REGS_USER (abi 2, regs) and STACK_USER (size bytes of which dyn valid).
func dwarfSampleRecord(chain []uint64, abi uint64, regs []uint64, stack []byte, size, dyn uint64) []byte {
	le := binary.LittleEndian
	b := sampleRecord(7, 9, chain...)
	b = le.AppendUint64(b, abi)
	if abi != 0 {
		for _, r := range regs {
			b = le.AppendUint64(b, r)
		}
	}
	b = le.AppendUint64(b, size)
	if size > 0 {
		data := make([]byte, size)
		copy(data, stack)
		b = append(b, data...)
		b = le.AppendUint64(b, dyn)
	}
	le.PutUint16(b[6:], uint16(len(b)))
	return b
}

func TestDecodeUserStack(t *testing.T) {
	n := bits.OnesCount64(arch.PerfRegsAMD64)
	regs := make([]uint64, n)
	for i := range regs {
		regs[i] = uint64(100 + i)
	}
	stack := []byte("0123456789abcdef")
	r := record{PCs: make([]uint64, 0, 16)}
	r.NUserRegs = n
	rec := dwarfSampleRecord([]uint64{perfContextKern, 0xffffffff81000010}, 2, regs, stack, 64, 16)
	if err := decodeRecord(rec, &r); err != nil {
		t.Fatal(err)
	}
	if !r.Kernel || len(r.PCs) != 1 || r.UserABI != 2 || len(r.UserRegs) != n || r.UserRegs[n-1] != uint64(100+n-1) || string(r.UserStack) != string(stack) {
		t.Fatalf("decoded kernel=%v pcs=%x abi=%d regs=%v stack=%q", r.Kernel, r.PCs, r.UserABI, r.UserRegs, r.UserStack)
	}
	var ar arch.Regs
	if err := ar.SetPerf(arch.AMD64, arch.PerfRegsAMD64, r.UserRegs); err != nil {
		t.Fatal(err)
	}
	// perf numbering: ax bx cx dx si di bp sp ip, then r8-r15.
	if ar.SP() != 107 || ar.PC() != 108 || ar.R[arch.AMD64RBP] != 106 {
		t.Errorf("sp %d pc %d rbp %d, want 107 108 106", ar.SP(), ar.PC(), ar.R[arch.AMD64RBP])
	}

	// A kernel thread: abi 0, no registers, no stack.
	if err := decodeRecord(dwarfSampleRecord([]uint64{perfContextKern, 0xffffffff81000010}, 0, nil, nil, 0, 0), &r); err != nil {
		t.Fatal(err)
	}
	if r.UserABI != 0 || len(r.UserRegs) != 0 || r.UserStack != nil {
		t.Errorf("kernel thread decoded abi=%d regs=%v stack=%q", r.UserABI, r.UserRegs, r.UserStack)
	}

	// dyn_size beyond size is capped; a size beyond the record is an error.
	if err := decodeRecord(dwarfSampleRecord(nil, 2, regs, stack, 16, 99), &r); err != nil || len(r.UserStack) != 16 {
		t.Errorf("dyn_size > size: err %v, %d bytes", err, len(r.UserStack))
	}
	bad := dwarfSampleRecord(nil, 2, regs, stack, 16, 16)
	binary.LittleEndian.PutUint64(bad[len(bad)-8-16-8:], 1<<20)
	if err := decodeRecord(bad, &r); err == nil {
		t.Error("user stack larger than the record accepted")
	}
	if err := decodeRecord(dwarfSampleRecord(nil, 2, regs[:3], nil, 0, 0), &r); err == nil {
		t.Error("short register block accepted")
	}
}

func FuzzDecodeUserStack(f *testing.F) {
	n := bits.OnesCount64(arch.PerfRegsAMD64)
	regs := make([]uint64, n)
	f.Add(dwarfSampleRecord([]uint64{0x401000}, 2, regs, []byte("stack"), 32, 8))
	f.Add(dwarfSampleRecord(nil, 0, nil, nil, 0, 0))
	r := record{PCs: make([]uint64, 0, maxCallchain)}
	r.NUserRegs = n
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := decodeRecord(b, &r); err != nil || r.Type != recSample {
			return // other records leave the user stack fields alone
		}
		if len(r.UserRegs) > n || len(r.UserStack) > len(b) {
			t.Fatalf("decoded %d registers, %d stack bytes from %d", len(r.UserRegs), len(r.UserStack), len(b))
		}
	})
}
