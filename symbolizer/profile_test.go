package symbolizer_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	_ "github.com/rawstack/rawstack/symbolizer/elfsrc"
	"github.com/rawstack/rawstack/symbolizer/export/folded"
	"github.com/rawstack/rawstack/symbolizer/export/pprof"
	"github.com/rawstack/rawstack/symbolizer/export/text"
	"github.com/rawstack/rawstack/symbolizer/internal/fixture"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// traceFixture is a stream that maps the C corpus binary into a process
// the way the loader does (one ModuleLoad per PT_LOAD), samples stacks in
// it, then unloads it and maps another file at the same address.
type traceFixture struct {
	bin      string
	base     uint64            // load bias
	funcs    map[string]uint64 // symbol → vaddr
	trace    []byte
	leaf     uint64 // vaddr of the sampled leaf
	caller   uint64 // return address (vaddr) in main
	textSeg  elf.ProgHeader
	nSamples int
}

func buildTrace(t *testing.T) *traceFixture {
	testbuild.Need(t, "gcc", "builds the fixture")
	dir := fixture.Build(t, []string{"elfsrc/testdata/prog.c"}, []string{"gcc"}, "gcc -O2 -g -o prog prog.c")
	tf := &traceFixture{bin: filepath.Join(dir, "prog"), base: 0x555555554000, funcs: map[string]uint64{}}
	f, err := elf.Open(tf.bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buildID := locate.BuildID(f)
	syms, _ := f.Symbols()
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			tf.funcs[s.Name] = s.Value
		}
	}
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic, PointerSize: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := uint64(1)
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		if p.Flags&elf.PF_X != 0 {
			tf.textSeg = p.ProgHeader
		}
		start := p.Vaddr &^ 0xfff
		w.WriteModuleLoad(&format.ModuleLoad{Time: 100, Pid: 42, ID: id, Base: tf.base + start, Size: (p.Vaddr + p.Memsz - start + 0xfff) &^ 0xfff,
			FileOffset: p.Off &^ 0xfff, Kind: format.ModuleELF, Path: tf.bin, BuildID: buildID})
		id++
	}
	tf.leaf = tf.funcs["nearest"] + 8
	tf.caller = tf.funcs["main"] + 0x20
	w.WriteStack(1, []uint64{tf.base + tf.leaf, tf.base + tf.caller, 0x1234})
	for i := 0; i < 5; i++ {
		w.WriteSample(format.Sample{Time: 200 + int64(i), Pid: 42, Tid: 42, Weight: 1000000, Stack: 1})
	}
	// A module whose file is gone: kept as module+offset.
	w.WriteModuleLoad(&format.ModuleLoad{Time: 100, Pid: 42, ID: 100, Base: 0x7f0000000000, Size: 0x10000, Kind: format.ModuleELF, Path: "/nonexistent/libgone.so"})
	w.WriteStack(2, []uint64{0x7f0000000123})
	w.WriteSample(format.Sample{Time: 300, Pid: 42, Tid: 42, Weight: 1000000, Stack: 2})
	// Unload everything in pid 42 and map the missing file where prog
	// was: the same stack now means something else.
	for i := uint64(1); i < id; i++ {
		w.WriteModuleUnload(format.ModuleUnload{Time: 400, Pid: 42, ID: i})
	}
	w.WriteModuleLoad(&format.ModuleLoad{Time: 500, Pid: 42, ID: 200, Base: tf.base, Size: 0x100000, Kind: format.ModuleELF, Path: "/nonexistent/other.so"})
	w.WriteSample(format.Sample{Time: 600, Pid: 42, Tid: 42, Weight: 1000000, Stack: 1})
	w.WriteSample(format.Sample{Time: 601, Pid: 42, Tid: 42, Weight: 5, Stack: 1, Flags: format.SampleOffCPU})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	tf.trace = buf.Bytes()
	tf.nSamples = 8
	return tf
}

func buildProfile(t *testing.T, tf *traceFixture) *symbolizer.Profile {
	r, err := format.NewReader(bytes.NewReader(tf.trace))
	if err != nil {
		t.Fatal(err)
	}
	p, err := symbolizer.Build(r, &symbolizer.Options{NoDebuginfod: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// llvm returns llvm-symbolizer's frames for vaddr of bin as AppendLLVM text.
func llvm(t *testing.T, bin string, vaddr uint64) string {
	out, err := exec.Command("llvm-symbolizer", "--obj", bin, fmt.Sprintf("%#x", vaddr)).Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestBuildNormalizesAndSymbolizes(t *testing.T) {
	testbuild.Need(t, "llvm-symbolizer", "llvm-symbolizer is the oracle")
	tf := buildTrace(t)
	p := buildProfile(t, tf)
	if got := p.TotalCount(); got != int64(tf.nSamples) {
		t.Fatalf("%d samples, want %d", got, tf.nSamples)
	}
	// Find the aggregate of the five samples of stack 1 while prog was mapped.
	var s *symbolizer.Sample
	for _, x := range p.Samples {
		if x.Count == 5 {
			s = x
		}
	}
	if s == nil || len(s.Locs) != 3 {
		t.Fatalf("no aggregate of 5 samples with 3 locations: %+v", p.Samples)
	}
	if s.CPUNanos != 5000000 {
		t.Errorf("CPU ns %d, want 5000000", s.CPUNanos)
	}
	leaf, caller, none := p.Locations[s.Locs[0]], p.Locations[s.Locs[1]], p.Locations[s.Locs[2]]
	if leaf.Addr != tf.leaf || caller.Addr != tf.caller || !caller.Caller || leaf.Caller {
		t.Errorf("normalized to %#x (caller %v), %#x (caller %v); want %#x, %#x (caller)", leaf.Addr, leaf.Caller, caller.Addr, caller.Caller, tf.leaf, tf.caller)
	}
	if got, want := string(symbolizer.AppendLLVM(nil, leaf.Frames)), llvm(t, tf.bin, tf.leaf); got != want {
		t.Errorf("leaf frames:\n%s\nllvm-symbolizer:\n%s", got, want)
	}
	// Return addresses are symbolized inside the call: at pc-1.
	if got, want := string(symbolizer.AppendLLVM(nil, caller.Frames)), llvm(t, tf.bin, tf.caller-1); got != want {
		t.Errorf("caller frames:\n%s\nllvm-symbolizer at pc-1:\n%s", got, want)
	}
	if none.Module != nil || none.String() != "0x1234" || len(none.Frames) != 0 {
		t.Errorf("address in no module: %q module %v frames %v", none.String(), none.Module, none.Frames)
	}
	var gone, reloaded bool
	for _, l := range p.Locations {
		switch l.String() {
		case "libgone.so+0x123":
			gone = true
		case fmt.Sprintf("other.so+%#x", tf.leaf):
			reloaded = true
		}
	}
	if !gone {
		t.Error("location in a missing file is not kept as libgone.so+0x123")
	}
	if !reloaded {
		t.Errorf("after the unload, the same stack should fall in other.so+%#x", tf.leaf)
	}
}

func TestExports(t *testing.T) {
	tf := buildTrace(t)
	p := buildProfile(t, tf)

	var pb bytes.Buffer
	if err := pprof.Write(&pb, p); err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(bytes.NewReader(pb.Bytes()))
	if err != nil {
		t.Fatalf("pprof output does not parse: %v", err)
	}
	if err := pp.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var n, cpu int64
	for _, s := range pp.Sample {
		n += s.Value[0]
		cpu += s.Value[1]
	}
	if n != int64(tf.nSamples) || cpu != 7000000 {
		t.Errorf("pprof totals %d samples, %d ns; want %d, 7000000", n, cpu, tf.nSamples)
	}
	var withBuildID bool
	for _, m := range pp.Mapping {
		if m.File == tf.bin && m.BuildID != "" && len(m.BuildID) == 40 {
			withBuildID = true
		}
	}
	if !withBuildID {
		t.Error("no mapping of the binary carries its build id")
	}
	var names []string
	for _, f := range pp.Function {
		names = append(names, f.Name)
	}
	for _, want := range []string{"nearest", "main", "0x1234", "libgone.so+0x123"} {
		if !contains(names, want) {
			t.Errorf("pprof functions %q lack %q", names, want)
		}
	}
	// go tool pprof must read it.
	if goTool, err := exec.LookPath("go"); err == nil {
		path := filepath.Join(t.TempDir(), "p.pb.gz")
		os.WriteFile(path, pb.Bytes(), 0o644)
		out, err := exec.Command(goTool, "tool", "pprof", "-top", "-nodecount=50", path).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "nearest") {
			t.Errorf("go tool pprof -top does not show nearest:\n%s", out)
		}
	}

	var fb bytes.Buffer
	if err := folded.Write(&fb, p, folded.Samples); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(fb.String()), "\n")
	var total int
	found := false
	for _, l := range lines {
		i := strings.LastIndexByte(l, ' ')
		var c int
		if _, err := fmt.Sscan(l[i+1:], &c); err != nil || i < 0 {
			t.Fatalf("bad folded line %q", l)
		}
		total += c
		frames := strings.Split(l[:i], ";")
		if frames[0] == "0x1234" && frames[len(frames)-1] == "nearest" && contains(frames, "main") && c == 5 {
			found = true
		}
	}
	if total != tf.nSamples {
		t.Errorf("folded counts sum to %d, want %d", total, tf.nSamples)
	}
	if !found {
		t.Errorf("no root-first stack 0x1234;…main…;nearest 5 in:\n%s", fb.String())
	}

	var tb bytes.Buffer
	if err := text.Write(&tb, p, 5); err != nil {
		t.Fatal(err)
	}
	rep := tb.String()
	for _, want := range []string{"8 samples", "Top 5 by self", "Top 5 by total", "nearest  [" + tf.bin + "]", "62.50%"} {
		if !strings.Contains(rep, want) {
			t.Errorf("text report lacks %q:\n%s", want, rep)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestRawStackUnwound records a RawStack event (registers and a copy of
// the stack) stopped at the first instruction of nearest, whose return
// address into main is the word at the stack pointer, and checks that the
// symbolizer unwinds it with the binary's CFI.
func TestRawStackUnwound(t *testing.T) {
	tf := buildTrace(t)
	f, err := elf.Open(tf.bin)
	if err != nil {
		t.Fatal(err)
	}
	buildID := locate.BuildID(f)
	var buf bytes.Buffer
	w, _ := format.NewWriter(&buf, format.Header{OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic, PointerSize: 8}, nil)
	id := uint64(1)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			start := p.Vaddr &^ 0xfff
			w.WriteModuleLoad(&format.ModuleLoad{Time: 1, Pid: 7, ID: id, Base: tf.base + start, Size: (p.Vaddr + p.Memsz - start + 0xfff) &^ 0xfff,
				FileOffset: p.Off &^ 0xfff, Kind: format.ModuleELF, Path: tf.bin, BuildID: buildID})
			id++
		}
	}
	f.Close()
	const sp = 0x7ffd00001000
	stack := make([]byte, 64)
	ret := tf.base + tf.caller
	for i := 0; i < 8; i++ {
		stack[i] = byte(ret >> (8 * i))
	}
	// DWARF registers of amd64: 6 rbp, 7 rsp, 16 rip.
	w.WriteRawStack(&format.RawStack{Time: 5, Pid: 7, Tid: 7, Weight: 1000, RegMask: 1<<6 | 1<<7 | 1<<16,
		Regs: []uint64{0, sp, tf.base + tf.funcs["nearest"]}, StackAddr: sp, Data: stack})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, _ := format.NewReader(bytes.NewReader(buf.Bytes()))
	p, err := symbolizer.Build(r, &symbolizer.Options{NoDebuginfod: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.RawStacks != 1 || len(p.Samples) != 1 {
		t.Fatalf("%d raw stacks, %d samples", p.RawStacks, len(p.Samples))
	}
	s := p.Samples[0]
	if len(s.Locs) < 2 {
		t.Fatalf("unwound %d frames, want at least 2 (nearest, main)", len(s.Locs))
	}
	leaf, caller := p.Locations[s.Locs[0]], p.Locations[s.Locs[1]]
	if leaf.FunctionName(len(leaf.Frames)-1) != "nearest" || caller.Abs != ret || caller.FunctionName(len(caller.Frames)-1) != "main" {
		t.Errorf("unwound to %s (%#x), %s (%#x); want nearest, then main at %#x",
			leaf.FunctionName(0), leaf.Abs, caller.FunctionName(0), caller.Abs, ret)
	}
}
