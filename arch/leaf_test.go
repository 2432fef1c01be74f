package arch

import (
	"encoding/binary"
	"testing"
)

// TestLeafCaller walks the states of a shrink-wrapped x86-64 function:
// before its prologue (CFA = rsp+8, rbp untouched: the frame-pointer chain
// misses the caller), after push %rbp (saved rbp equals rbp: still
// missing), after mov %rsp,%rbp (CFA from rbp: linked), and a stack window
// too small to hold the return address.
func TestLeafCaller(t *testing.T) {
	const sp, fp, ret = 0x7000, 0x7100, 0x401234
	stack := make([]byte, 64)
	binary.LittleEndian.PutUint64(stack[0:], fp)  // pushed rbp (prologue case)
	binary.LittleEndian.PutUint64(stack[8:], ret) // return address above it
	regs := Regs{Arch: AMD64}
	regs.Set(AMD64.PC(), 0x401000)
	regs.Set(AMD64.SP(), sp)
	regs.Set(AMD64.FP(), fp)
	entry := Rule{CFA: CFAReg, CFAReg: uint8(AMD64.SP()), CFAOff: 8, RA: RegOffset, RAOff: -8}
	pushed := Rule{CFA: CFAReg, CFAReg: uint8(AMD64.SP()), CFAOff: 16, RA: RegOffset, RAOff: -8, FP: RegOffset, FPOff: -16}
	linked := Rule{CFA: CFAReg, CFAReg: uint8(AMD64.FP()), CFAOff: 16, RA: RegOffset, RAOff: -8, FP: RegOffset, FPOff: -16}
	for _, c := range []struct {
		name         string
		rule         Rule
		spAt         uint64
		data         []byte
		ra           uint64
		unlinked, ok bool
	}{
		{"entry", entry, sp + 8, stack[8:], ret, true, true},
		{"after push", pushed, sp, stack, ret, true, true},
		{"linked", linked, sp, stack, 0, false, true},
		{"window too small", entry, sp + 8, stack[8:12], 0, false, false},
		{"no row", Rule{}, sp, stack, 0, false, false},
	} {
		r := regs
		r.Set(AMD64.SP(), c.spAt)
		ra, unlinked, ok := LeafCaller(c.rule, &r, &StackCopy{Addr: c.spAt, Data: c.data})
		if ra != c.ra || unlinked != c.unlinked || ok != c.ok {
			t.Errorf("%s: LeafCaller = %#x, %v, %v; want %#x, %v, %v", c.name, ra, unlinked, ok, c.ra, c.unlinked, c.ok)
		}
	}
}
