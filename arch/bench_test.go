package arch

import (
	"encoding/binary"
	"testing"
)

// ehAsm assembles a small .eh_frame by hand: the CIEs and FDEs of the
// synthetic stacks below and seeds for the fuzz tests.
type ehAsm struct{ b []byte }

func (e *ehAsm) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *ehAsm) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// entry appends a length-prefixed entry, padded to 8 bytes with
// DW_CFA_nop, and returns its offset.
func (e *ehAsm) entry(body []byte) int {
	off := len(e.b)
	for (4+len(body))%8 != 0 {
		body = append(body, 0)
	}
	e.u32(uint32(len(body)))
	e.b = append(e.b, body...)
	return off
}

// cie appends a "zR" CIE with absolute 8-byte pointers.
func (e *ehAsm) cie(daf int8, ra byte, instr ...byte) int {
	body := []byte{0, 0, 0, 0, 1, 'z', 'R', 0, 1, byte(daf) & 0x7f, ra, 1, peUdata8}
	return e.entry(append(body, instr...))
}

func (e *ehAsm) fde(cie int, begin, size uint64, instr ...byte) {
	ptr := uint32(len(e.b) + 4 - cie)
	body := binary.LittleEndian.AppendUint32(nil, ptr)
	body = binary.LittleEndian.AppendUint64(body, begin)
	body = binary.LittleEndian.AppendUint64(body, size)
	body = append(body, 0) // augmentation data length
	e.entry(append(body, instr...))
}

// synthStack builds an amd64 module of nfunc functions without frame
// pointers (function i at 0x400000+i*0x100, frame size 8+16*(i%4+1),
// saving rbx in odd ones) plus an outermost function, and a stack of depth
// frames through them. It returns the table, the innermost registers, the
// stack and the expected pcs.
func synthStack(t testing.TB, nfunc, depth int) (*Table, Regs, *StackCopy, []uint64) {
	const base = 0x400000
	var e ehAsm
	c := e.cie(-8, AMD64RIP, cfaDefCFA, AMD64RSP, 8, cfaOffset|AMD64RIP, 1)
	size := func(i int) uint64 { return 8 + 16*uint64(i%4+1) }
	for i := 0; i < nfunc; i++ {
		instr := append([]byte{cfaAdvanceLoc | 4, cfaDefCFAOffset}, uleb(size(i))...)
		if i%2 == 1 {
			instr = append(instr, cfaOffset|AMD64RBX, 2)
		}
		e.fde(c, base+uint64(i)*0x100, 0x100, instr...)
	}
	outer := base + uint64(nfunc)*0x100
	e.fde(c, outer, 0x100, cfaUndefined, AMD64RIP)
	e.u32(0)
	tab, err := NewTable(Sections{File: "synthetic", Arch: AMD64, EHFrame: e.b, EHFrameAddr: 0x1000})
	if err != nil {
		t.Fatal(err)
	}
	pcs := make([]uint64, depth)
	for j := range pcs {
		pcs[j] = base + uint64(j%nfunc)*0x100 + 0x20
	}
	pcs[depth-1] = outer + 0x20
	var total uint64
	for j := 0; j < depth-1; j++ {
		total += size(j % nfunc)
	}
	const top = 0x7fff00000000
	stack := &StackCopy{Addr: top - total - 64, Data: make([]byte, total+64)}
	sp := stack.Addr
	for j := 0; j < depth-1; j++ {
		cfa := sp + size(j%nfunc)
		binary.LittleEndian.PutUint64(stack.Data[cfa-8-stack.Addr:], pcs[j+1])
		sp = cfa
	}
	var r Regs
	r.Arch = AMD64
	r.Set(AMD64RIP, pcs[0])
	r.Set(AMD64RSP, stack.Addr)
	r.Set(AMD64RBP, 0x1234) // garbage: no frame pointers here
	r.Set(AMD64RBX, 7)
	return tab, r, stack, pcs
}

func synthUnwinder(tab *Table) *Unwinder {
	ms := &Modules{}
	ms.Add(Module{Start: 0x400000, End: 0x500000, Table: tab})
	return NewUnwinder(ms)
}

func TestUnwindSynthetic(t *testing.T) {
	tab, regs, stack, want := synthStack(t, 16, 64)
	u := synthUnwinder(tab)
	got := u.Unwind(&regs, stack, nil)
	if !equalPCs(got, want) {
		t.Fatalf("unwound:%s\nwant:%s", formatFrames(got, nil), formatFrames(want, nil))
	}
	if u.Stop != StopOutermost || u.CFIFrames != len(want) {
		t.Errorf("stop %v after %d CFI frames, want outermost after %d", u.Stop, u.CFIFrames, len(want))
	}
	// A cut stack copy ends the walk with StopBadMemory, not a wrong frame.
	short := &StackCopy{Addr: stack.Addr, Data: stack.Data[:len(stack.Data)/2]}
	got = u.Unwind(&regs, short, got[:0])
	if u.Stop != StopBadMemory || len(got) == 0 || !equalPCs(got, want[:len(got)]) {
		t.Errorf("cut stack: stop %v, %d frames; want bad memory and a prefix", u.Stop, len(got))
	}
	// MaxFrames caps the walk.
	u.MaxFrames = 10
	if got = u.Unwind(&regs, stack, got[:0]); len(got) != 10 || u.Stop != StopMaxFrames {
		t.Errorf("MaxFrames 10: %d frames, stop %v", len(got), u.Stop)
	}
}

// TestUnwindAllocs pins the hot path: once the rule cache is warm, an
// unwind into a buffer with room allocates nothing, for a *StackCopy and
// for another Memory.
func TestUnwindAllocs(t *testing.T) {
	tab, regs, stack, want := synthStack(t, 16, 64)
	u := synthUnwinder(tab)
	pcs := make([]uint64, 0, 128)
	var mem Memory = stack
	var other Memory = memFunc(stack.ReadMemory)
	for _, m := range []Memory{mem, other} {
		pcs = u.Unwind(&regs, m, pcs[:0])
		if allocs := testing.AllocsPerRun(100, func() { pcs = u.Unwind(&regs, m, pcs[:0]) }); allocs != 0 {
			t.Errorf("%T: %v allocations per unwind, want 0", m, allocs)
		}
		if len(pcs) != len(want) {
			t.Errorf("%T: %d frames, want %d", m, len(pcs), len(want))
		}
	}
}

type memFunc func(addr uint64, p []byte) error

func (f memFunc) ReadMemory(addr uint64, p []byte) error { return f(addr, p) }

// BenchmarkUnwindCached measures ns/frame with every rule in the hot
// cache: 64 frames through 16 functions.
func BenchmarkUnwindCached(b *testing.B) {
	tab, regs, stack, want := synthStack(b, 16, 64)
	u := synthUnwinder(tab)
	pcs := make([]uint64, 0, 128)
	pcs = u.Unwind(&regs, stack, pcs[:0])
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pcs = u.Unwind(&regs, stack, pcs[:0])
	}
	b.StopTimer()
	if len(pcs) != len(want) {
		b.Fatalf("%d frames, want %d", len(pcs), len(want))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pcs)), "ns/frame")
}

// BenchmarkUnwindUncached measures the cold path: a new Unwinder (empty
// cache) per walk, so every frame is a module and a row binary search.
func BenchmarkUnwindUncached(b *testing.B) {
	tab, regs, stack, _ := synthStack(b, 16, 64)
	ms := &Modules{}
	ms.Add(Module{Start: 0x400000, End: 0x500000, Table: tab})
	pcs := make([]uint64, 0, 128)
	u := NewUnwinder(ms)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		u.gen = ^uint64(0) // invalidates the cache
		pcs = u.Unwind(&regs, stack, pcs[:0])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pcs)), "ns/frame")
}

// TestUnwindStops drives the walk into each way it can end.
func TestUnwindStops(t *testing.T) {
	var e ehAsm
	c := e.cie(-8, AMD64RIP, cfaDefCFA, AMD64RSP, 8, cfaOffset|AMD64RIP, 1)
	e.fde(c, 0x401000, 0x100, cfaDefCFAOffset, 0, cfaOffset|AMD64RIP, 0)    // CFA = sp: no progress
	e.fde(c, 0x401100, 0x100)                                               // CFA = sp+8, RA at sp
	e.fde(c, 0x401200, 0x100, cfaDefCFAExpression, 1, 0x96 /* DW_OP_nop */) // unsupported CFA: frame pointers
	e.u32(0)
	tab, err := NewTable(Sections{File: "stops", Arch: AMD64, EHFrame: e.b, EHFrameAddr: 0x1000})
	if err != nil {
		t.Fatal(err)
	}
	ms := &Modules{}
	ms.Add(Module{Start: 0x400000, End: 0x500000, Table: tab})
	const sp = 0x7fff0000
	stack := &StackCopy{Addr: sp, Data: make([]byte, 256)}
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(stack.Data[off:], v) }
	regs := func(pc, fp uint64) *Regs {
		r := &Regs{Arch: AMD64}
		r.Set(AMD64RIP, pc)
		r.Set(AMD64RSP, sp)
		r.Set(AMD64RBP, fp)
		return r
	}
	u := NewUnwinder(ms)
	for _, c := range []struct {
		name  string
		setup func()
		regs  *Regs
		want  Stop
		n     int
	}{
		{"cfa=sp", func() {}, regs(0x401010, 0), StopNoProgress, 1},
		// A function that "returns" into itself one word up each time
		// walks off the end of the stack copy.
		{"self-return", func() {
			for off := 0; off < 256; off += 8 {
				put(off, 0x401110)
			}
		}, regs(0x401110, 0), StopBadMemory, 33},
		// A frame-pointer chain that points at itself.
		{"fp-loop", func() { put(0x40, sp+0x40); put(0x48, 0x401210) }, regs(0x401210, sp+0x40), StopNoRule, 2},
		// A frame-pointer chain ending in a zero frame pointer.
		{"fp-end", func() { put(0x40, 0); put(0x48, 0x401220) }, regs(0x401210, sp+0x40), StopOutermost, 2},
		{"pc=0", func() {}, regs(0, 0), StopOutermost, 0},
		{"no-module", func() {}, regs(0x900000, 0), StopOutermost, 1},
	} {
		clear(stack.Data)
		c.setup()
		pcs := u.Unwind(c.regs, stack, nil)
		if u.Stop != c.want || len(pcs) != c.n {
			t.Errorf("%s: %d frames, stop %v; want %d, %v", c.name, len(pcs), u.Stop, c.n, c.want)
		}
	}
	var noSP Regs
	noSP.Arch = AMD64
	noSP.Set(AMD64RIP, 0x401010)
	if u.Unwind(&noSP, stack, nil); u.Stop != StopNoRegs {
		t.Errorf("no sp: stop %v", u.Stop)
	}
}

func TestModules(t *testing.T) {
	ms := &Modules{}
	a, b := &Table{}, &Table{}
	ms.Add(Module{Start: 0x3000, End: 0x4000, Table: a})
	ms.Add(Module{Start: 0x1000, End: 0x2000, Table: b})
	for _, c := range []struct {
		addr uint64
		want *Table
	}{{0xfff, nil}, {0x1000, b}, {0x1fff, b}, {0x2000, nil}, {0x3000, a}, {0x3fff, a}, {0x4000, nil}} {
		m := ms.Find(c.addr)
		if (m == nil) != (c.want == nil) || m != nil && m.Table != c.want {
			t.Errorf("Find(%#x) = %+v", c.addr, m)
		}
	}
	// A new mapping over part of an old one replaces it.
	ms.Add(Module{Start: 0x1800, End: 0x3800, Table: a})
	if ms.Len() != 1 || ms.Find(0x1000) != nil || ms.Find(0x1800).Table != a {
		t.Errorf("overlapping Add: %d modules", ms.Len())
	}
	if !ms.Remove(0x1800) || ms.Remove(0x1800) || ms.Len() != 0 {
		t.Errorf("Remove")
	}
}
