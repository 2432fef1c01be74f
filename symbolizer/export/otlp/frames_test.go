package otlp_test

import (
	"bytes"
	"debug/elf"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/otlpcheck"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
)

// runtimeTrace writes a stream whose one sample holds every kind of frame
// the stream's own events name, in a stand-in interpreter (testdata/pyeval.c,
// whose evaluation loop has CPython's name):
//
//	leaf: callee (native) ← JIT code a perf map names (fibJit) ← JIT code
//	V8's metadata names (mix, with shop inlined) ← _PyEval_EvalFrameDefault
//	(where the Python frames beta, alpha go) ← main.
//
// The perf map's entry comes after the sample when late is set.
func runtimeTrace(t *testing.T, late bool) []byte {
	t.Helper()
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O0", "-g", "-fno-pie", "-no-pie", "-o", "{dir}/pyeval", "{in0}"},
		Inputs: []string{"testdata/pyeval.c"},
		Out:    "pyeval",
	})
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]uint64{}
	for _, s := range syms {
		addr[s.Name] = s.Value
	}
	var text *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	if text == nil || addr["callee"] == 0 || addr[symbolizerEval] == 0 || addr["main"] == 0 {
		t.Fatalf("pyeval: no text segment or symbols: %v", addr)
	}
	const pid, anon, jitPC, v8PC = 7, 0x7f0000000000, 0x7f0000001010, 0x7f0000002020
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{PointerSize: 8, OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteProcess(format.Process{Time: 1, Pid: pid, Name: "node"})
	w.WriteModuleLoad(&format.ModuleLoad{Time: 1, Pid: pid, ID: 1, Base: text.Vaddr, Size: text.Memsz, FileOffset: text.Off, Kind: format.ModuleELF, Path: bin})
	w.WriteModuleLoad(&format.ModuleLoad{Time: 1, Pid: pid, ID: 2, Base: anon, Size: 0x10000, Kind: format.ModuleAnon, Path: "//anon"})
	w.WriteString(1, fibJit)
	jit := format.JITCode{Time: 5, Pid: pid, Addr: jitPC &^ 0xff, Size: 0x100, Name: 1, Source: format.JITSourcePerfMap}
	if !late {
		w.WriteJITCode(&jit)
	}
	w.WritePyCode(&format.PyCode{ID: 1, Name: "alpha", File: "/srv/app.py", FirstLine: 10})
	w.WritePyCode(&format.PyCode{ID: 2, Name: "beta", File: "/srv/app.py", FirstLine: 20})
	w.WriteJITFunc(&format.JITFunc{ID: 1, Runtime: format.JITRuntimeV8, Name: "shop", File: "/srv/shop.js"})
	w.WriteJITFunc(&format.JITFunc{ID: 2, Runtime: format.JITRuntimeV8, Name: "mix", File: "/srv/shop.js"})
	w.WriteFrames(1, []format.PyFrame{{Code: 2}, {Code: 1, Entry: true}}, format.PyGILHeld,
		[]format.JITFrame{{PC: v8PC, Func: 1, Line: 7, Inlined: true}, {PC: v8PC, Func: 2, Line: 3}})
	w.WriteStack(1, []uint64{addr["callee"] + 2, jitPC, v8PC, addr[symbolizerEval] + 8, addr["main"] + 8})
	for i := int64(0); i < 3; i++ {
		w.WriteSample(format.Sample{Time: 10 + i, Pid: pid, Tid: pid, Weight: 1000, Stack: 1, Python: 1})
	}
	if late {
		jit.Time = 20
		w.WriteJITCode(&jit)
	}
	w.Close()
	return buf.Bytes()
}

const (
	symbolizerEval = "_PyEval_EvalFrameDefault"
	fibJit         = "JS:*fibJit /srv/app.js:3" // the perf map's name
)

// buildStacks returns the stacks (root first) that Build gives every
// file output, native frames as "?" when raw.
func buildStacks(t *testing.T, data []byte, raw bool) []string {
	t.Helper()
	r, err := format.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	p, err := symbolizer.Build(r, &symbolizer.Options{NoDebuginfod: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range p.Samples {
		var names []string
		for _, li := range s.Locs {
			l := p.Locations[li]
			if raw && l.Module != nil && l.Module.Kind == format.ModuleELF {
				names = append(names, "?")
				continue
			}
			if len(l.Frames) == 0 {
				names = append(names, "?")
			}
			for i := range l.Frames {
				names = append(names, l.FunctionName(i))
			}
		}
		slices.Reverse(names)
		out = append(out, strings.Join(names, ";"))
	}
	return out
}

// otlpStacks returns the stacks of p, root first, with the frame types of
// their locations; native frames without lines are "?".
func otlpStacks(p pprofile.Profiles) (stacks, types []string) {
	d := p.Dictionary()
	for _, rp := range p.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, pr := range sp.Profiles().All() {
				for _, s := range pr.Samples().All() {
					var names, fts []string
					for _, li := range d.StackTable().At(int(s.StackIndex())).LocationIndices().All() {
						loc := d.LocationTable().At(int(li))
						ft := frameType(d, loc)
						if loc.Lines().Len() == 0 {
							names, fts = append(names, "?"), append(fts, ft)
						}
						for _, l := range loc.Lines().All() {
							fn := d.FunctionTable().At(int(l.FunctionIndex()))
							names, fts = append(names, d.StringTable().At(int(fn.NameStrindex()))), append(fts, ft)
						}
					}
					slices.Reverse(names)
					slices.Reverse(fts)
					stacks, types = append(stacks, strings.Join(names, ";")), append(types, strings.Join(fts, ";"))
				}
			}
		}
	}
	return stacks, types
}

// TestRuntimeFrames: JIT code from a perf map, frames from V8's metadata
// and Python frames reach OTLP, raw and named, in the order every other
// output has them (symbolizer.Build's), with their runtimes' frame types
// and lines.
func TestRuntimeFrames(t *testing.T) {
	data := runtimeTrace(t, false)
	for _, raw := range []bool{false, true} {
		want := buildStacks(t, data, raw)
		p := convert(t, data, raw)
		got, types := otlpStacks(p)
		t.Logf("raw=%v: %s (%s)", raw, got, types)
		if !slices.Equal(got, want) {
			t.Errorf("raw=%v: OTLP stacks %q, Build's %q", raw, got, want)
		}
		named := "main;" + symbolizerEval + ";alpha;beta;mix;shop;" + fibJit + ";callee"
		if raw {
			named = "?;?;alpha;beta;mix;shop;" + fibJit + ";?"
		}
		if len(got) != 1 || got[0] != named {
			t.Errorf("raw=%v: stacks %q, want %q", raw, got, named)
		}
		if wantTypes := "native;native;cpython;cpython;v8js;v8js;v8js;native"; len(types) != 1 || types[0] != wantTypes {
			t.Errorf("raw=%v: frame types %q, want %q", raw, types, wantTypes)
		}
		d := p.Dictionary()
		lines := map[string]int64{}
		for _, loc := range d.LocationTable().All() {
			for _, l := range loc.Lines().All() {
				fn := d.FunctionTable().At(int(l.FunctionIndex()))
				lines[d.StringTable().At(int(fn.NameStrindex()))+" "+d.StringTable().At(int(fn.FilenameStrindex()))] = l.Line()
			}
		}
		for fn, line := range map[string]int64{"alpha /srv/app.py": 10, "beta /srv/app.py": 20, "mix /srv/shop.js": 3, "shop /srv/shop.js": 7} {
			if lines[fn] != line {
				t.Errorf("raw=%v: %s at line %d, want %d (%v)", raw, fn, lines[fn], line, lines)
			}
		}
	}
}

// TestJITNameArrivesLate: a perf map line read after the sample it names
// (the recorder polls the map) still names it on the stream: Flush keeps
// the sample back for one batch, FlushAll (the stream's end) keeps none.
func TestJITNameArrivesLate(t *testing.T) {
	data := runtimeTrace(t, true)
	r, err := format.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	b := otlp.NewBuilder(r.Header(), otlp.Options{Raw: true})
	var events []*format.Event
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		e := *ev
		events = append(events, &e)
	}
	// Everything up to the last sample, then a batch.
	last := 0
	for i, ev := range events {
		if ev.Kind == format.KindSample {
			last = i
		}
	}
	for _, ev := range events[:last+1] {
		b.Event(ev)
	}
	if p, n := b.Flush(); n != 0 || p.ResourceProfiles().Len() != 0 {
		t.Fatalf("the first batch holds %d samples, want them kept back", n)
	}
	for _, ev := range events[last+1:] {
		b.Event(ev)
	}
	p, n := b.Flush()
	if err := otlpcheck.Check(p); err != nil {
		t.Fatal(err)
	}
	got, _ := otlpStacks(p)
	if n != 3 || len(got) != 1 || !strings.Contains(got[0], ";"+fibJit+";") {
		t.Errorf("the second batch: %d samples, stacks %q, want fibJit named", n, got)
	}
	// Without the late entry, the samples wait once only.
	b = otlp.NewBuilder(r.Header(), otlp.Options{Raw: true})
	for _, ev := range events[:last+1] {
		b.Event(ev)
	}
	b.Flush()
	if _, n := b.Flush(); n != 3 {
		t.Errorf("the second batch without the entry: %d samples, want 3", n)
	}
	b = otlp.NewBuilder(r.Header(), otlp.Options{Raw: true})
	for _, ev := range events[:last+1] {
		b.Event(ev)
	}
	if _, n := b.FlushAll(); n != 3 {
		t.Errorf("FlushAll: %d samples, want 3", n)
	}
}
