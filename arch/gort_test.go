package arch

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// buildGoCgo builds testdata/gocgo (Go with cgo), with DWARF or as Go
// release binaries are built: -ldflags=-s -w, so no symbol table and no
// .debug_frame.
func buildGoCgo(t testing.TB, release bool) string {
	t.Helper()
	testbuild.Need(t, "gcc", "builds the cgo fixture's C part")
	args, out := []string{"build", "-o", "{dir}/gocgo", "./testdata/gocgo"}, "gocgo"
	if release {
		args, out = []string{"build", "-ldflags=-s -w", "-o", "{dir}/gocgo-release", "./testdata/gocgo"}, "gocgo-release"
	}
	return testbuild.Build(t, testbuild.Cmd{
		Tool: "go", Args: args, Inputs: []string{filepath.Join("testdata", "gocgo")}, Out: out,
		Env: []string{"CGO_ENABLED=1", "GOFLAGS="}, Dir: ".", Key: runtime.Version(),
	})
}

// symRange returns the address and size of symbol name in f's symbol
// table.
func symRange(t *testing.T, f *elf.File, name string) [2]uint64 {
	t.Helper()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name {
			return [2]uint64{s.Value, s.Value + s.Size}
		}
	}
	t.Fatalf("no symbol %s", name)
	return [2]uint64{}
}

// TestGoRuntimeTable checks what a table learns of a Go binary's code
// (with cgo)
// from its pclntab, against the binary's own symbol table: the stack
// switches that keep a frame pointer (systemstack, asmcgocall, mcall,
// cgocallback), those that do not (morestack, gogo), Go's signal
// restorer, and the frame pointer Go's .debug_frame leaves out. A
// release build (-s -w: no symbols, no CFI) gets the same from its
// pclntab alone, instead of no table at all.
func TestGoRuntimeTable(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testbuild.Impossible(t, "amd64-only")
	}
	dbgPath, relPath := buildGoCgo(t, false), buildGoCgo(t, true)
	dbg, err := elf.Open(dbgPath)
	if err != nil {
		t.Fatal(err)
	}
	defer dbg.Close()
	tab, err := NewTableELF(dbg, dbgPath)
	if err != nil || tab.gort == nil {
		t.Fatalf("no Go part: %v", err)
	}
	g := tab.gort
	for _, name := range []string{"runtime.systemstack.abi0", "runtime.asmcgocall.abi0", "runtime.mcall", "runtime.cgocallback.abi0"} {
		r := symRange(t, dbg, name)
		if !in(g.switches, r[0]) || !in(g.switches, r[1]-1) {
			t.Errorf("%s [%#x, %#x) is not a frame-keeping stack switch: %#x", name, r[0], r[1], g.switches)
		}
		if rule := tab.Lookup(r[0] + 8); !rule.Switch {
			t.Errorf("%s+8: %v, want Switch", name, rule)
		}
	}
	// (The pclntab's ranges run to the next function, padding included.)
	if r := symRange(t, dbg, "runtime.cgocallback.abi0"); g.back[0] != r[0] || g.back[1] < r[1] {
		t.Errorf("cgocallback %#x, want %#x", g.back, r)
	}
	for _, name := range []string{"runtime.morestack.abi0", "gogo"} {
		r := symRange(t, dbg, name)
		if !in(g.stops, r[0]) || in(g.switches, r[0]) {
			t.Errorf("%s [%#x, %#x): want a switch without frame: stops %#x", name, r[0], r[1], g.stops)
		}
	}
	if r := symRange(t, dbg, "runtime.sigreturn__sigaction.abi0"); g.sigret[0] != r[0] || g.sigret[1] < r[1] {
		t.Errorf("sigreturn %#x, want %#x", g.sigret, r)
	}
	// main.middle calls: past its prologue its row must say where rbp
	// was saved, as the prologue "push rbp; mov rbp, rsp" put it.
	mid := symRange(t, dbg, "main.middle")
	var linkedRows int
	for pc := mid[0]; pc < mid[1]; pc++ {
		r := tab.Lookup(pc)
		if !r.Go {
			t.Fatalf("main.middle+%#x: %v not marked Go", pc-mid[0], r)
		}
		if r.CFA == CFAReg && r.CFAOff >= 16 {
			linkedRows++
			if r.FP != RegOffset || r.FPOff != -16 {
				t.Errorf("main.middle+%#x: %v, want fp=c-16", pc-mid[0], r)
			}
		}
	}
	if linkedRows == 0 {
		t.Error("main.middle has no row with its frame pushed")
	}

	rel, err := elf.Open(relPath)
	if err != nil {
		t.Fatal(err)
	}
	defer rel.Close()
	rtab, err := NewTableELF(rel, relPath)
	if err != nil || rtab.gort == nil {
		t.Fatalf("release binary: %v, Go part %v", err, rtab)
	}
	rg := rtab.gort
	if rg.text != g.text || rg.sigret != g.sigret || rg.back != g.back ||
		len(rg.switches) != len(g.switches) || len(rg.stops) != len(g.stops) {
		t.Errorf("release binary's Go part %+v, debug binary's %+v", *rg, *g)
	}
	// Without CFI, cgocallback's rows come from the pclntab and agree
	// with the debug binary's .debug_frame.
	for pc := g.back[0]; pc < g.back[1]; pc++ {
		want, got := tab.Lookup(pc), rtab.Lookup(pc)
		if want.CFA != got.CFA || want.CFAOff != got.CFAOff || want.RAOff != got.RAOff {
			t.Errorf("cgocallback+%#x: release %v, debug %v", pc-g.back[0], got, want)
			break
		}
	}
	// LazyTable finds the same.
	lt, err := NewLazyTableELF(dbg, dbgPath)
	if err != nil || lt.gort == nil || lt.gort.back != g.back {
		t.Errorf("lazy table: %v, Go part %v", err, lt.gort)
	}
}

// TestGoSigreturnRule holds the signal frame Go's restorer gets to the
// one glibc's CFI gives its own restorer, __restore_rt: the same kernel
// frame lies above both.
func TestGoSigreturnRule(t *testing.T) {
	libc := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	tab, err := OpenTable(libc)
	if err != nil {
		testbuild.Skip(t, "glibc's CFI, the oracle: %v", err)
	}
	found := 0
	for i := 0; i < tab.Len(); i++ {
		_, r := tab.Row(i)
		if !r.Signal {
			continue
		}
		found++
		if r != goSigreturnAMD64 {
			t.Errorf("__restore_rt: %+v\nGo's restorer: %+v", r, goSigreturnAMD64)
		}
	}
	if found != 1 {
		t.Errorf("%d signal rows in %s, want 1", found, libc)
	}
}

// TestSpliceGoSwitch unwinds a synthetic sample taken on a Go thread's
// g0 stack, in a function systemstack called: the copy holds the g0
// frames, the goroutine's frames are elsewhere, and the kernel's
// frame-pointer walk (Chain) crossed to them through systemstack's frame
// record. The walk takes the chain above that record, and only a chain
// that agrees with the copy.
func TestSpliceGoSwitch(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testbuild.Impossible(t, "amd64-only")
	}
	path := buildGo(t, "goprog")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := NewTableELF(f, path)
	if err != nil {
		t.Fatal(err)
	}
	mid := symRange(t, f, "main.middle")
	var pc uint64
	var rule Rule
	for a := mid[0]; a < mid[1]; a++ {
		if r := tab.Lookup(a); r.CFA == CFAReg && r.CFAOff > 16 {
			pc, rule = a, r
			break
		}
	}
	if pc == 0 {
		t.Fatal("main.middle: no row past its prologue")
	}
	ss := symRange(t, f, "runtime.systemstack.abi0")
	raSS := ss[0] + 0x48 // a return address past the switch
	const (
		g0   = 0x7f0000001000 // the stack copy: the g0 stack
		goro = 0xc000040000   // systemstack's frame record, on the goroutine's stack
	)
	cfa := g0 + uint64(rule.CFAOff)
	data := make([]byte, rule.CFAOff+64)
	binary.LittleEndian.PutUint64(data[cfa-8-g0:], raSS)
	binary.LittleEndian.PutUint64(data[cfa-16-g0:], goro)
	var regs Regs
	regs.Arch = AMD64
	regs.Set(AMD64RIP, pc)
	regs.Set(AMD64RSP, g0)
	regs.Set(AMD64RBP, cfa-16)
	mods := &Modules{}
	mods.Add(Module{Start: 0, End: 1 << 40, Table: tab})
	above := []uint64{mid[0] + 1, mid[0] + 2, mid[0] + 3}
	for _, tc := range []struct {
		name  string
		chain []uint64
		want  []uint64
		stop  Stop
	}{
		{"agrees", append([]uint64{pc, raSS}, above...), append([]uint64{pc, raSS}, above...), StopChain},
		{"disagrees", append([]uint64{pc, raSS + 1}, above...), []uint64{pc, raSS}, StopBadMemory},
		{"none", nil, []uint64{pc, raSS}, StopBadMemory},
	} {
		u := NewUnwinder(mods)
		u.Chain = tc.chain
		got := u.Unwind(&regs, &StackCopy{Addr: g0, Data: data}, nil)
		if hexList(got) != hexList(tc.want) || u.Stop != tc.stop {
			t.Errorf("%s: %s (%v), want %s (%v)", tc.name, hexList(got), u.Stop, hexList(tc.want), tc.stop)
		}
	}
	// Without the chain's checks on a live memory, the walk steps the
	// switch by its frame record: the goroutine's stack is readable.
	live := &twoStacks{a: StackCopy{Addr: g0, Data: data}, b: StackCopy{Addr: goro, Data: make([]byte, 64)}}
	binary.LittleEndian.PutUint64(live.b.Data[8:], above[0])
	u := NewUnwinder(mods)
	got := u.Unwind(&regs, live, nil)
	if len(got) < 3 || got[2] != above[0] {
		t.Errorf("live memory: %s, want %#x third", hexList(got), above[0])
	}
}

// twoStacks is the memory of two stacks.
type twoStacks struct{ a, b StackCopy }

func (m *twoStacks) ReadMemory(addr uint64, p []byte) error {
	if err := m.a.ReadMemory(addr, p); err == nil {
		return nil
	}
	return m.b.ReadMemory(addr, p)
}

func hexList(pcs []uint64) string {
	s := ""
	for _, pc := range pcs {
		s += fmt.Sprintf(" %#x", pc)
	}
	return s
}
