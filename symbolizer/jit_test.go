package symbolizer_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/folded"
	"github.com/rawstack/rawstack/symbolizer/export/pprof"
	"github.com/rawstack/rawstack/symbolizer/export/text"
)

// jitStream writes a stream of process 7 ("node") whose JIT code changes
// over time, and one sample per (time, stack) given.
func jitStream(t *testing.T, build func(w *format.Writer)) *symbolizer.Profile {
	t.Helper()
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic, PointerSize: 8}, &format.WriterOptions{ChunkSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	w.WriteProcess(format.Process{Time: 1, Pid: 7, Name: "node"})
	// A file-backed module at 0x5000 and anonymous executable memory at 0x1000.
	w.WriteModuleLoad(&format.ModuleLoad{Time: 1, Pid: 7, ID: 1, Base: 0x5000, Size: 0x1000, Kind: format.ModuleELF, Path: "/nonexistent/node"})
	w.WriteModuleLoad(&format.ModuleLoad{Time: 1, Pid: 7, ID: 2, Base: 0x1000, Size: 0x3000, Kind: format.ModuleAnon, Path: "//anon"})
	for i, s := range []string{"", "JS:*a app.js:1:1", "JS:*b app.js:2:1", "long M.moved(long)", "exit only", "app.js", "in elf"} {
		if i > 0 {
			w.WriteString(uint64(i), s)
		}
	}
	build(w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := format.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	p, err := symbolizer.Build(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var stackID uint64

func sample(w *format.Writer, tm int64, pcs ...uint64) {
	stackID++
	w.WriteStack(stackID, pcs)
	w.WriteSample(format.Sample{Time: tm, Pid: 7, Tid: 7, Weight: 1, Stack: stackID})
}

// leafNames returns, per sample in stream order of first appearance, the
// leaf function names.
func names(p *symbolizer.Profile) map[string]int64 {
	out := map[string]int64{}
	for _, s := range p.Samples {
		var parts []string
		for _, li := range s.Locs {
			parts = append(parts, p.Locations[li].FunctionName(0))
		}
		out[strings.Join(parts, " < ")] += s.Count
	}
	return out
}

func TestJITNamesByTime(t *testing.T) {
	p := jitStream(t, func(w *format.Writer) {
		// a at [0x1000,0x1100) from t=100; b replaces its first half at t=200.
		w.WriteJITCode(&format.JITCode{Time: 100, Pid: 7, Addr: 0x1000, Size: 0x100, Name: 1, Source: format.JITSourcePerfMap})
		sample(w, 150, 0x1010) // a
		sample(w, 150, 0x1010) // a (same stack id kind, another sample)
		sample(w, 150, 0x10f0) // a
		sample(w, 50, 0x1010)  // before a was published: a (published after)
		w.WriteJITCode(&format.JITCode{Time: 200, Pid: 7, Addr: 0x1000, Size: 0x80, Name: 2, Source: format.JITSourcePerfMap})
		sample(w, 250, 0x1010)         // b
		sample(w, 250, 0x10f0)         // a's other half is gone with it: unnamed
		sample(w, 260, 0x5010, 0x1010) // an ELF address is never named from JIT code
		// m moves from 0x2000 to 0x3000 at t=300 (jitdump CODE_MOVE).
		w.WriteJITCode(&format.JITCode{Time: 100, Pid: 7, Addr: 0x2000, Size: 0x40, Name: 3, Source: format.JITSourceJitdump,
			Lines: []format.JITLine{{Offset: 0, Line: 10, File: 5}, {Offset: 0x20, Line: 11, Column: 3, File: 5}}})
		w.WriteJITCode(&format.JITCode{Time: 100, Pid: 7, Addr: 0x5000, Size: 0x40, Name: 6})
		sample(w, 280, 0x2024, 0x2040) // m twice: leaf, then a return address at its end
		w.WriteJITUnload(format.JITUnload{Time: 300, Pid: 7, Addr: 0x2000, Size: 0x40})
		w.WriteJITCode(&format.JITCode{Time: 300, Pid: 7, Addr: 0x3000, Size: 0x40, Name: 3, Source: format.JITSourceJitdump})
		sample(w, 350, 0x2010)
		sample(w, 350, 0x3010)
		// Published only at exit, after every sample.
		sample(w, 400, 0x2800)
		w.WriteJITCode(&format.JITCode{Time: 900, Pid: 7, Addr: 0x2800, Size: 0x10, Name: 4, Source: format.JITSourcePerfMap})
	})
	got := names(p)
	for k, v := range map[string]int64{
		"JS:*a app.js:1:1":                        4,
		"JS:*b app.js:2:1":                        1,
		"node+0x10 < JS:*b app.js:2:1":            1,
		"long M.moved(long) < long M.moved(long)": 1,
		"exit only":                               1,
	} {
		if got[k] != v {
			t.Errorf("%q: %d samples, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if got["long M.moved(long)"] != 1 {
		t.Errorf("moved code at its new address: %v", got)
	}
	// Unnamed: the replaced half, and the old address after the move.
	unnamed := 0
	for k, v := range got {
		if strings.HasPrefix(k, "anon+") {
			unnamed += int(v)
		}
	}
	if unnamed != 2 {
		t.Errorf("%d unnamed samples, want 2: %v", unnamed, got)
	}
	// The moved code's line table, and the pseudo-module in every export.
	var sawLine bool
	for _, l := range p.Locations {
		if l.Module != nil && l.Module.Name() == "[jit] node" && len(l.Frames) == 1 && l.Frames[0].Line == 11 && l.Frames[0].File == "app.js" && l.Frames[0].Column == 3 {
			sawLine = true
		}
	}
	if !sawLine {
		t.Error("no frame with the jitdump line app.js:11:3")
	}
	var tb, fb, pb bytes.Buffer
	text.Write(&tb, p, 20)
	folded.Write(&fb, p, folded.Samples)
	if err := pprof.Write(&pb, p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tb.String(), "JS:*a app.js:1:1  [[jit] node]") {
		t.Errorf("text report:\n%s", tb.String())
	}
	if !strings.Contains(fb.String(), "JS:*a app.js:1:1 4\n") {
		t.Errorf("folded:\n%s", fb.String())
	}
	pp, err := profile.Parse(&pb)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range pp.Location {
		if l.Mapping != nil && l.Mapping.File == "[jit] node" && len(l.Line) == 1 && l.Line[0].Function.Name == "JS:*b app.js:2:1" {
			found = true
		}
	}
	if !found {
		t.Error("pprof has no JIT location in a \"[jit] node\" mapping")
	}
}
