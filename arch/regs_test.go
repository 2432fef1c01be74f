package arch

import "testing"

func TestPerfRegs(t *testing.T) {
	// perf_regs.h x86: AX BX CX DX SI DI BP SP IP FLAGS CS SS DS ES FS GS R8..R15.
	var vals []uint64
	for p := 0; p < 24; p++ {
		if PerfRegsAMD64&(1<<p) != 0 {
			vals = append(vals, 0x100+uint64(p))
		}
	}
	if len(vals) != 17 {
		t.Fatalf("PerfRegsAMD64 names %d registers, want 17 (16 GPRs + IP)", len(vals))
	}
	if PerfRegsAMD64&(0xf<<12) != 0 {
		t.Fatal("PerfRegsAMD64 names DS/ES/FS/GS, which x86-64 kernels reject")
	}
	var r Regs
	if err := r.SetPerf(AMD64, PerfRegsAMD64, vals); err != nil {
		t.Fatal(err)
	}
	want := map[int]uint64{AMD64RAX: 0x100, AMD64RBX: 0x101, AMD64RCX: 0x102, AMD64RDX: 0x103, AMD64RSI: 0x104,
		AMD64RDI: 0x105, AMD64RBP: 0x106, AMD64RSP: 0x107, AMD64RIP: 0x108, 8: 0x110, 15: 0x117}
	for d, v := range want {
		if !r.Has(d) || r.R[d] != v {
			t.Errorf("DWARF reg %d = %#x (known %v), want %#x", d, r.R[d], r.Has(d), v)
		}
	}
	if r.PC() != 0x108 || r.SP() != 0x107 || r.FP() != 0x106 {
		t.Errorf("pc/sp/fp = %#x/%#x/%#x", r.PC(), r.SP(), r.FP())
	}
	if err := r.SetPerf(AMD64, PerfRegsAMD64, vals[:5]); err == nil {
		t.Error("short block accepted")
	}

	vals = vals[:0]
	for p := 0; p < 33; p++ {
		vals = append(vals, 0x200+uint64(p))
	}
	if err := r.SetPerf(ARM64, PerfRegsARM64, vals); err != nil {
		t.Fatal(err)
	}
	if r.PC() != 0x220 || r.SP() != 0x21f || r.FP() != 0x21d || r.R[ARM64LR] != 0x21e || r.R[0] != 0x200 {
		t.Errorf("arm64 pc/sp/fp/lr/x0 = %#x/%#x/%#x/%#x/%#x", r.PC(), r.SP(), r.FP(), r.R[ARM64LR], r.R[0])
	}
	if PerfToDWARF(AMD64, 9) != -1 || PerfToDWARF(AMD64, 16) != 8 || PerfToDWARF(ARM64, 33) != -1 {
		t.Error("PerfToDWARF edge cases")
	}
}

func TestMaskedRoundTrip(t *testing.T) {
	var r Regs
	r.Arch = ARM64
	r.Set(ARM64PC, 1)
	r.Set(ARM64SP, 2)
	r.Set(ARM64FP, 3)
	r.Set(ARM64LR, 4)
	vals, mask := r.AppendMasked(nil)
	var back Regs
	if err := back.SetMasked(ARM64, mask, vals); err != nil {
		t.Fatal(err)
	}
	if back != r {
		t.Errorf("round trip: %+v, want %+v", back, r)
	}
	if err := back.SetMasked(ARM64, mask|1, vals); err == nil {
		t.Error("mask naming more registers than values accepted")
	}
}

func TestUserRegs(t *testing.T) {
	w := make([]uint64, 27)
	for i := range w {
		w[i] = uint64(i)
	}
	var r Regs
	if err := r.SetUserRegs(AMD64, w); err != nil {
		t.Fatal(err)
	}
	// user_regs_struct: rbp is word 4, rbx 5, rip 16, rsp 19, r15 0, rax 10.
	if r.FP() != 4 || r.R[AMD64RBX] != 5 || r.PC() != 16 || r.SP() != 19 || r.R[15] != 0 || r.R[AMD64RAX] != 10 {
		t.Errorf("amd64 user regs mapped wrong: %+v", r.R)
	}
	if err := r.SetUserRegs(ARM64, w[:20]); err == nil {
		t.Error("short arm64 block accepted")
	}
}
