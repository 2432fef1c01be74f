package arch

import (
	"encoding/binary"
	"errors"
	"testing"
)

// checkTable checks the invariants every Table keeps, whatever its input.
func checkTable(t *testing.T, tab *Table) {
	t.Helper()
	if len(tab.starts) != len(tab.ids) {
		t.Fatalf("%d starts, %d ids", len(tab.starts), len(tab.ids))
	}
	for i := range tab.starts {
		start, rule := tab.Row(i)
		if i > 0 && tab.starts[i] <= tab.starts[i-1] {
			t.Fatalf("row %d start %#x not above row %d's", i, start, i-1)
		}
		if int(tab.ids[i]) >= len(tab.rules) {
			t.Fatalf("row %d rule %d of %d", i, tab.ids[i], len(tab.rules))
		}
		if i > 0 && tab.ids[i] == tab.ids[i-1] {
			t.Fatalf("rows %d and %d repeat one rule", i-1, i)
		}
		if got := tab.Lookup(start); got != rule {
			t.Fatalf("Lookup(%#x) = %v, want %v", start, got, rule)
		}
		if start > 0 && i == 0 && tab.Lookup(start-1).CFA != CFANone {
			t.Fatalf("Lookup(%#x) below the first row found a rule", start-1)
		}
	}
	if n := len(tab.starts); n > 0 {
		if last, r := tab.Row(n - 1); r.CFA != CFANone || tab.Lookup(last+1<<40).CFA != CFANone {
			t.Fatalf("last row %v is not the end of an FDE", r)
		}
	}
}

// FuzzNewTable parses arbitrary bytes as .eh_frame or .debug_frame (flags
// bit 0: arm64, bit 1: .debug_frame), checks the table's invariants and
// that errors name an offset inside the section, then unwinds the same
// bytes as a stack with the table.
func FuzzNewTable(f *testing.F) {
	var e ehAsm
	c := e.cie(-8, AMD64RIP, cfaDefCFA, AMD64RSP, 8, cfaOffset|AMD64RIP, 1)
	e.fde(c, 0x1000, 0x40, cfaAdvanceLoc|1, cfaDefCFAOffset, 16, cfaOffset|AMD64RBP, 2,
		cfaAdvanceLoc|3, cfaDefCFARegister, AMD64RBP, cfaRememberState, cfaAdvanceLoc|8, cfaDefCFA, AMD64RSP, 8, cfaRestoreState)
	e.fde(c, 0x2000, 0x10, cfaDefCFAExpression, 2, opBreg0+AMD64RBP, 0x78, opDeref)
	f.Add(e.b, uint64(0x1000), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64, flags uint8) {
		s := Sections{File: "fuzz", Arch: AMD64, EHFrameAddr: addr}
		if flags&1 != 0 {
			s.Arch = ARM64
		}
		sect := ".eh_frame"
		if flags&2 != 0 {
			s.DebugFrame, sect = data, ".debug_frame"
		} else {
			s.EHFrame = data
		}
		tab, err := NewTable(s)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FormatError", err, err)
			}
			if fe.Section != sect || fe.File != "fuzz" || fe.Off < 0 || fe.Off > int64(len(data)) {
				t.Fatalf("error %v names the wrong place (section %q, %d bytes)", err, sect, len(data))
			}
		}
		if tab == nil {
			t.Fatal("nil table")
		}
		checkTable(t, tab)
		if tab.Len() == 0 || len(data) < 8 {
			return
		}
		// Unwind the bytes as a stack through this table.
		ms := &Modules{}
		ms.Add(Module{Start: 0, End: 1 << 63, Table: tab})
		u := NewUnwinder(ms)
		u.MaxFrames = 64
		var r Regs
		r.Arch = s.Arch
		start, _ := tab.Row(0)
		r.Set(r.Arch.PC(), start+uint64(data[0]))
		r.Set(r.Arch.SP(), 0x10000)
		r.Set(r.Arch.FP(), 0x10000+uint64(data[1]))
		r.Set(r.Arch.CalleeSaved()[0], 0x10008)
		if r.Arch == ARM64 {
			r.Set(ARM64LR, start+uint64(data[2]))
		}
		pcs := u.Unwind(&r, &StackCopy{Addr: 0x10000, Data: data}, nil)
		if len(pcs) > u.MaxFrames || u.Stop == StopNone {
			t.Fatalf("%d frames, stop %v", len(pcs), u.Stop)
		}
	})
}

// FuzzUnwind walks arbitrary stack bytes from arbitrary registers through
// the synthetic amd64 module, reading memory both as a *StackCopy and
// through the Memory interface: it must end, with a reason, within
// MaxFrames, and both readers must agree.
func FuzzUnwind(f *testing.F) {
	tab, regs, stack, _ := synthStack(f, 16, 64)
	f.Add(stack.Data, regs.PC(), regs.SP()-stack.Addr, uint64(0x1234))
	f.Add(stack.Data, regs.PC()+0x100, uint64(8), uint64(16))
	f.Add([]byte{8: 0x20, 9: 0x00, 10: 0x40}, uint64(0x400020), uint64(0), uint64(0))
	ms := &Modules{}
	ms.Add(Module{Start: 0x400000, End: 0x500000, Table: tab})
	u1, u2 := NewUnwinder(ms), NewUnwinder(ms)
	u1.MaxFrames, u2.MaxFrames = 256, 256
	var p1, p2 []uint64
	f.Fuzz(func(t *testing.T, data []byte, pc, spOff, fp uint64) {
		const base = 0x7fff00000000
		var r Regs
		r.Arch = AMD64
		r.Set(AMD64RIP, pc)
		r.Set(AMD64RSP, base+spOff%0x10000)
		r.Set(AMD64RBP, fp)
		st := &StackCopy{Addr: base, Data: data}
		p1 = u1.Unwind(&r, st, p1[:0])
		p2 = u2.Unwind(&r, memFunc(st.ReadMemory), p2[:0])
		if len(p1) > u1.MaxFrames || u1.Stop == StopNone {
			t.Fatalf("%d frames, stop %v", len(p1), u1.Stop)
		}
		if !equalPCs(p1, p2) || u1.Stop != u2.Stop {
			t.Fatalf("StackCopy and Memory disagree:%s (%v)\nvs%s (%v)", formatFrames(p1, nil), u1.Stop, formatFrames(p2, nil), u2.Stop)
		}
	})
}

// FuzzEHFrameHdr parses arbitrary .eh_frame_hdr bytes: errors must be
// *FormatErrors inside the data, and a count must fit the data.
func FuzzEHFrameHdr(f *testing.F) {
	f.Add([]byte{1, 0x1b, 0x03, 0x3b, 0x20, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint64(0x2004))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		h, err := ParseEHFrameHdr("fuzz", data, addr)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Off < 0 || fe.Off > int64(len(data)) {
				t.Fatalf("bad error %v", err)
			}
			return
		}
		if len(data) < 4 {
			t.Fatalf("%d bytes accepted", len(data))
		}
		if data[2] != peOmit && data[3] == peDatarel|peSdata4 && h.FDECount > uint64(len(data))/8 {
			t.Fatalf("count %d accepted for %d bytes", h.FDECount, len(data))
		}
	})
}

// FuzzUnwindChain unwinds arbitrary stack bytes with an arbitrary
// frame-pointer chain (Unwinder.Chain, the kernel's walk of the same
// sample): the walk never takes more than MaxFrames, ends with a reason,
// and takes from the chain only a run of its entries (the part above a
// frame record it reached through the copy, never an entry from before
// it).
func FuzzUnwindChain(f *testing.F) {
	tab, regs, stack, _ := synthStack(f, 16, 64)
	chain := make([]byte, 8*4)
	binary.LittleEndian.PutUint64(chain, regs.PC())
	f.Add(stack.Data, regs.PC(), regs.SP()-stack.Addr, uint64(0x1234), chain)
	f.Add([]byte{8: 0x20, 9: 0x00, 10: 0x40}, uint64(0x600020), uint64(0), uint64(0x7fff00000000), chain)
	ms := &Modules{}
	ms.Add(Module{Start: 0x400000, End: 0x500000, Table: tab})
	u := NewUnwinder(ms)
	u.MaxFrames = 256
	var pcs []uint64
	f.Fuzz(func(t *testing.T, data []byte, pc, spOff, fp uint64, chainBytes []byte) {
		const base = 0x7fff00000000
		var r Regs
		r.Arch = AMD64
		r.Set(AMD64RIP, pc)
		r.Set(AMD64RSP, base+spOff%0x10000)
		r.Set(AMD64RBP, fp)
		u.Chain = u.Chain[:0]
		for i := 0; i+8 <= len(chainBytes) && i < 8*300; i += 8 {
			u.Chain = append(u.Chain, binary.LittleEndian.Uint64(chainBytes[i:]))
		}
		pcs = u.Unwind(&r, &StackCopy{Addr: base, Data: data}, pcs[:0])
		if len(pcs) > u.MaxFrames || u.Stop == StopNone {
			t.Fatalf("%d frames, stop %v", len(pcs), u.Stop)
		}
		if u.Stop != StopChain {
			return
		}
		// The spliced tail is a run of the chain: find where it starts.
		for k := 1; k <= len(pcs); k++ {
			tail := pcs[len(pcs)-k:]
			for i := 1; i+len(tail) <= len(u.Chain); i++ {
				if equalPCs(tail, u.Chain[i:i+len(tail)]) {
					return
				}
			}
		}
		t.Fatalf("stop %v but no run of the chain %#x ends the walk %#x", u.Stop, u.Chain, pcs)
	})
}
