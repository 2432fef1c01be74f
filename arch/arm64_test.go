package arch

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// arm64Fixture is an aarch64 build of testdata/deep.c with its symbols,
// call sites and readelf's unwind rows.
type arm64Fixture struct {
	path  string
	syms  map[string]elf.Symbol
	calls map[[2]string]uint64 // (caller, callee) → return address
	rows  []oracleRow
	text  []byte
	tAddr uint64
}

func loadARM64(t *testing.T, flags ...string) *arm64Fixture {
	t.Helper()
	path := testbuild.CC(t, "aarch64-linux-gnu-gcc", "", []string{"testdata/deep.c"}, flags...)
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fx := &arm64Fixture{path: path, syms: map[string]elf.Symbol{}, calls: map[[2]string]uint64{}}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			fx.syms[s.Name] = s
		}
	}
	text := f.Section(".text")
	if fx.text, err = text.Data(); err != nil {
		t.Fatal(err)
	}
	fx.tAddr = text.Addr
	// Call sites: every BL (0b100101 imm26) inside a known function.
	byAddr := map[uint64]string{}
	for n, s := range fx.syms {
		byAddr[s.Value] = n
	}
	for n, s := range fx.syms {
		if s.Value < fx.tAddr || s.Value+s.Size > fx.tAddr+uint64(len(fx.text)) {
			continue
		}
		for a := s.Value; a < s.Value+s.Size; a += 4 {
			insn := binary.LittleEndian.Uint32(fx.text[a-fx.tAddr:])
			if insn&0xfc000000 != 0x94000000 {
				continue
			}
			imm := int64(insn&0x03ffffff) << 38 >> 36 // sign-extend imm26, times 4
			if callee, ok := byAddr[uint64(int64(a)+imm)]; ok {
				fx.calls[[2]string{n, callee}] = a + 4
			}
		}
	}
	fx.rows, _ = readelfRows(t, path, ".eh_frame")
	return fx
}

// oracle returns readelf's row covering addr.
func (fx *arm64Fixture) oracle(addr uint64) (oracleRow, bool) {
	var best oracleRow
	found := false
	for _, r := range fx.rows {
		if r.start <= addr && addr < r.end && r.loc <= addr && (!found || r.loc >= best.loc) {
			best, found = r, true
		}
	}
	return best, found
}

func parseCFA(s string) (reg string, off uint64, err error) {
	i := strings.IndexByte(s, '+')
	if i < 0 {
		return "", 0, fmt.Errorf("CFA %q", s)
	}
	n, err := strconv.ParseUint(s[i+1:], 10, 64)
	return s[:i], n, err
}

func slotOff(v string) (uint64, bool) {
	if !strings.HasPrefix(v, "c-") {
		return 0, false
	}
	n, err := strconv.ParseUint(v[2:], 10, 64)
	return n, err == nil
}

// handStack lays out a stack for the frames pcs (innermost first; the
// outermost's return address is 0) following readelf's rows, so the
// unwinder is checked against readelf's reading of the CFI rather than its
// own. It returns the innermost registers and the stack.
func (fx *arm64Fixture) handStack(pcs []uint64) (Regs, *StackCopy, error) {
	const top = 0x7ffff0000000
	mem := map[uint64]uint64{}
	put := func(addr, v uint64) error {
		if old, ok := mem[addr]; ok && old != v {
			return fmt.Errorf("slot %#x written twice", addr)
		}
		mem[addr] = v
		return nil
	}
	k := len(pcs) - 1
	cfa := uint64(top)
	callerFP := uint64(0)
	var regs Regs
	regs.Arch = ARM64
	regs.Set(ARM64LR, 0xdeadbeef) // must not be used where the RA is saved
	var sp, fp uint64
	for i := k; i >= 0; i-- {
		look := pcs[i]
		if i > 0 {
			look--
		}
		o, ok := fx.oracle(look)
		if !ok {
			return regs, nil, fmt.Errorf("no readelf row for %#x", look)
		}
		ra := uint64(0)
		if i < k {
			ra = pcs[i+1]
		}
		reg, off, err := parseCFA(o.cfa)
		if err != nil {
			return regs, nil, err
		}
		raRule := o.cols["ra"]
		if n, ok := slotOff(raRule); ok {
			if err := put(cfa-n, ra); err != nil {
				return regs, nil, err
			}
		} else if i == 0 && (raRule == "u" || raRule == "") {
			regs.Set(ARM64LR, ra)
		} else {
			return regs, nil, fmt.Errorf("frame %d at %#x: ra rule %q", i, pcs[i], raRule)
		}
		fpRule := o.cols["x29"]
		fpSaved := false
		if n, ok := slotOff(fpRule); ok {
			if err := put(cfa-n, callerFP); err != nil {
				return regs, nil, err
			}
			fpSaved = true
		}
		for r := 19; r <= 28; r++ {
			if n, ok := slotOff(o.cols[fmt.Sprintf("x%d", r)]); ok {
				if err := put(cfa-n, 0x1900+uint64(r)); err != nil {
					return regs, nil, err
				}
			}
		}
		switch reg {
		case "sp":
			sp = cfa - off
			if fpSaved {
				fp = sp // what gcc's prologue does: mov x29, sp
			} else {
				fp = callerFP
			}
		case "x29":
			fp = cfa - off
			if !fpSaved && fp != callerFP {
				return regs, nil, fmt.Errorf("frame %d: CFA on an unsaved x29", i)
			}
			sp = fp - 64
		default:
			return regs, nil, fmt.Errorf("frame %d: CFA register %s", i, reg)
		}
		callerFP, cfa = fp, sp
	}
	regs.Set(ARM64PC, pcs[0])
	regs.Set(ARM64SP, sp)
	regs.Set(ARM64FP, fp)
	lo := sp
	for a := range mem {
		lo = min(lo, a)
	}
	st := &StackCopy{Addr: lo, Data: make([]byte, top+16-lo)}
	for a, v := range mem {
		binary.LittleEndian.PutUint64(st.Data[a-lo:], v)
	}
	return regs, st, nil
}

// TestUnwindARM64HandMade unwinds stacks laid out by hand from readelf's
// rows of an aarch64 -O2 -fomit-frame-pointer build: with the innermost
// frame at every instruction of leaf (prologue, body, epilogue; the return
// address in lr or on the stack) and of big_frame (a 4 KiB frame).
func TestUnwindARM64HandMade(t *testing.T) {
	fx := loadARM64(t, "-O2", "-fomit-frame-pointer")
	tab, err := OpenTable(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	ms := &Modules{}
	ms.Add(Module{Start: 0, End: 1 << 32, Table: tab})
	u := NewUnwinder(ms)
	call := func(caller, callee string) uint64 {
		ra, ok := fx.calls[[2]string{caller, callee}]
		if !ok {
			t.Fatalf("no call from %s to %s in %s", caller, callee, fx.path)
		}
		return ra
	}
	chains := []struct {
		inner   string
		callers []uint64
	}{
		{"leaf", []uint64{call("with_alloca", "leaf"), call("cmp", "with_alloca")}},
		{"big_frame", []uint64{call("no_frame", "big_frame"), call("main", "no_frame")}},
		{"recurse", []uint64{call("recurse", "recurse"), call("recurse", "recurse"), call("big_frame", "recurse")}},
	}
	checked := 0
	for _, c := range chains {
		s := fx.syms[c.inner]
		for pc := s.Value; pc < s.Value+s.Size; pc += 4 {
			want := append([]uint64{pc}, c.callers...)
			regs, st, err := fx.handStack(want)
			if err != nil {
				t.Fatalf("%s+%#x: %v", c.inner, pc-s.Value, err)
			}
			got := u.Unwind(&regs, st, nil)
			if !equalPCs(got, want) || u.Stop != StopOutermost {
				o, _ := fx.oracle(pc)
				t.Errorf("%s+%#x (readelf row cfa=%s %v): stop %v\ngot:%s\nwant:%s", c.inner, pc-s.Value, o.cfa, o.cols, u.Stop,
					formatFrames(got, nil), formatFrames(want, nil))
				continue
			}
			checked++
		}
	}
	t.Logf("%d hand-made arm64 stacks unwound as readelf's rows say", checked)
	if checked < 30 {
		t.Errorf("only %d stacks checked", checked)
	}
}

// TestARM64PointerAuth checks the return-address signing state against the
// disassembly of a -mbranch-protection=standard build: rows after paciasp
// and before autiasp must say the saved return address is signed, and the
// unwinder must strip the signature.
func TestARM64PointerAuth(t *testing.T) {
	fx := loadARM64(t, "-O2", "-mbranch-protection=standard")
	tab, err := OpenTable(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	const paciasp, autiasp = 0xd503233f, 0xd50323bf
	names := make([]string, 0, len(fx.syms))
	for n := range fx.syms {
		names = append(names, n)
	}
	sort.Strings(names)
	signedFns := 0
	for _, n := range names {
		s := fx.syms[n]
		if s.Value < fx.tAddr || s.Value+s.Size > fx.tAddr+uint64(len(fx.text)) || s.Size == 0 {
			continue
		}
		signed := false
		seen := false
		for a := s.Value; a < s.Value+s.Size; a += 4 {
			insn := binary.LittleEndian.Uint32(fx.text[a-fx.tAddr:])
			// The state changes after the signing instruction executes.
			if r := tab.Lookup(a); r.CFA != CFANone && r.RASigned != signed {
				t.Errorf("%s+%#x: rule says signed=%v, disassembly %v", n, a-s.Value, r.RASigned, signed)
			}
			switch insn {
			case paciasp:
				signed, seen = true, true
			case autiasp:
				signed = false
			}
		}
		if seen {
			signedFns++
		}
	}
	if signedFns == 0 {
		t.Fatalf("no paciasp in %s: is -mbranch-protection supported?", fx.path)
	}
	t.Logf("%d functions sign their return address; rules agree at every instruction", signedFns)

	// A signed return address on the stack comes out stripped.
	leaf := fx.syms["leaf"]
	ra := fx.calls[[2]string{"with_alloca", "leaf"}]
	var pc uint64
	for a := leaf.Value; a < leaf.Value+leaf.Size; a += 4 {
		if r := tab.Lookup(a); r.RASigned && r.RA == RegOffset {
			pc = a
			break
		}
	}
	if pc == 0 || ra == 0 {
		t.Fatalf("leaf has no signed row with a saved return address")
	}
	r := tab.Lookup(pc)
	if r.CFA != CFAReg || r.CFAReg != ARM64SP {
		t.Fatalf("leaf row %v: want an sp-based CFA", r)
	}
	const sp = 0x7ffff0000000
	st := &StackCopy{Addr: sp, Data: make([]byte, int(r.CFAOff)+16)}
	cfa := sp + uint64(r.CFAOff)
	binary.LittleEndian.PutUint64(st.Data[cfa+uint64(int64(r.RAOff))-sp:], ra|0x002a<<48) // a PAC in the top bits
	var regs Regs
	regs.Arch = ARM64
	regs.Set(ARM64PC, pc)
	regs.Set(ARM64SP, sp)
	regs.Set(ARM64FP, 0)
	ms := &Modules{}
	ms.Add(Module{Start: 0, End: 1 << 32, Table: tab})
	u := NewUnwinder(ms)
	u.MaxFrames = 2
	got := u.Unwind(&regs, st, nil)
	if len(got) != 2 || got[1] != ra {
		t.Errorf("signed return address: got %#x, want [%#x %#x]", got, pc, ra)
	}
}

// TestUnwindARM64FramePointers walks an AAPCS64 frame-record chain (x29
// points at {caller's x29, lr}) with no unwind tables: the innermost pc,
// then each record's lr, until a record whose x29 is 0.
func TestUnwindARM64FramePointers(t *testing.T) {
	const sp = 0x7ffff0000000
	st := &StackCopy{Addr: sp, Data: make([]byte, 0x400)}
	want := []uint64{0x400100, 0x400204, 0x400308, 0x40040c, 0x400510}
	rec := uint64(sp + 0x20)
	for i := 1; i < len(want); i++ {
		next := rec + 0x60
		if i == len(want)-1 {
			next = 0 // the outermost record
		}
		binary.LittleEndian.PutUint64(st.Data[rec-sp:], next)
		binary.LittleEndian.PutUint64(st.Data[rec+8-sp:], want[i])
		rec = next
	}
	var regs Regs
	regs.Arch = ARM64
	regs.Set(ARM64PC, want[0])
	regs.Set(ARM64SP, sp)
	regs.Set(ARM64FP, sp+0x20)
	regs.Set(ARM64LR, 0xdead) // frame-pointer walks take the return address from the record
	u := NewUnwinder(&Modules{})
	got := u.Unwind(&regs, st, nil)
	if !equalPCs(got, want) || u.Stop != StopOutermost || u.FPFrames != len(want)-1 {
		t.Errorf("got %#x (stop %v, %d fp frames), want %#x", got, u.Stop, u.FPFrames, want)
	}
}
