// Package export_test holds golden-file tests of the exporters over a
// profile built by hand, so the expected output does not depend on a
// compiler.
package export_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/folded"
	"github.com/rawstack/rawstack/symbolizer/export/pprof"
	"github.com/rawstack/rawstack/symbolizer/export/text"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// handProfile: main calls parse (with lex inlined into it) and run; one
// address fell in a module whose file was missing, one in no module.
func handProfile() *symbolizer.Profile {
	app := &symbolizer.Module{ModuleLoad: format.ModuleLoad{ID: 1, Base: 0x400000, Size: 0x10000, Kind: format.ModuleELF, Path: "/bin/app", BuildID: []byte{0xab, 0xcd}}}
	lib := &symbolizer.Module{ModuleLoad: format.ModuleLoad{ID: 2, Base: 0x7f0000000000, Size: 0x10000, Kind: format.ModuleELF, Path: "/lib/libgone.so"}}
	locs := []*symbolizer.Location{
		{Module: app, Abs: 0x401010, Addr: 0x401010, Frames: []symbolizer.Frame{{Function: "lex", File: "lex.c", Line: 10, Column: 3}, {Function: "parse", File: "parse.c", Line: 20, Column: 5}}},
		{Module: app, Abs: 0x401100, Addr: 0x401100, Caller: true, Frames: []symbolizer.Frame{{Function: "main", File: "main.c", Line: 5, Column: 1}}},
		{Module: app, Abs: 0x401200, Addr: 0x401200, Frames: []symbolizer.Frame{{Function: "run", File: "run.c", Line: 7, Column: 2}}},
		{Module: lib, Abs: 0x7f0000000123, Addr: 0x123},
		{Abs: 0xdead},
	}
	return &symbolizer.Profile{
		Modules:   []*symbolizer.Module{app, lib},
		Locations: locs,
		Samples: []*symbolizer.Sample{
			{Locs: []int{0, 1}, Count: 6, CPUNanos: 6000},
			{Locs: []int{2, 1}, Count: 3, CPUNanos: 3000},
			{Locs: []int{3, 1}, Count: 1, CPUNanos: 1000},
			{Locs: []int{4}, Count: 2, CPUNanos: 2000},
		},
		Start: 0, End: 1e9,
	}
}

func golden(t *testing.T, name string, got []byte) {
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestFoldedGolden(t *testing.T) {
	var b bytes.Buffer
	if err := folded.Write(&b, handProfile(), folded.Samples); err != nil {
		t.Fatal(err)
	}
	golden(t, "folded.golden", b.Bytes())
	b.Reset()
	folded.Write(&b, handProfile(), folded.CPUNanos)
	golden(t, "folded-cpu.golden", b.Bytes())
}

func TestTextGolden(t *testing.T) {
	var b bytes.Buffer
	if err := text.Write(&b, handProfile(), 4); err != nil {
		t.Fatal(err)
	}
	golden(t, "text.golden", b.Bytes())
}

// TestPprofRoundTrip writes the profile, parses it back and checks what
// go tool pprof relies on.
func TestPprofRoundTrip(t *testing.T) {
	var b bytes.Buffer
	if err := pprof.Write(&b, handProfile()); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 4 || len(p.Location) != 5 || len(p.Mapping) != 2 {
		t.Fatalf("%d samples, %d locations, %d mappings", len(p.Sample), len(p.Location), len(p.Mapping))
	}
	if p.Mapping[0].BuildID != "abcd" || p.Mapping[0].File != "/bin/app" {
		t.Errorf("mapping %+v", p.Mapping[0])
	}
	l := p.Location[0]
	if len(l.Line) != 2 || l.Line[0].Function.Name != "lex" || l.Line[1].Function.Name != "parse" || l.Line[1].Line != 20 {
		t.Errorf("inline lines of the first location: %+v", l.Line)
	}
	if n := p.Location[3].Line[0].Function.Name; n != "libgone.so+0x123" {
		t.Errorf("unsymbolized location named %q", n)
	}
	if n := p.Location[4].Line[0].Function.Name; n != "0xdead" {
		t.Errorf("address in no module named %q", n)
	}
	var total int64
	for _, s := range p.Sample {
		total += s.Value[1]
	}
	if total != 12000 || p.SampleType[1].Unit != "nanoseconds" {
		t.Errorf("cpu total %d %s", total, p.SampleType[1].Unit)
	}
}

func TestPprofMainMappingFirst(t *testing.T) {
	p := handProfile()
	p.Modules[0], p.Modules[1] = p.Modules[1], p.Modules[0] // the library loaded first
	var b bytes.Buffer
	if err := pprof.Write(&b, p); err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	if pp.Mapping[0].File != "/bin/app" {
		t.Errorf("first mapping %s, want the executable /bin/app (go tool pprof names the profile after it)", pp.Mapping[0].File)
	}
}

// offCPUProfile is handProfile plus time spent waiting: run blocked
// 40 ms, and main blocked 5 ms in a stack seen only off CPU.
func offCPUProfile() *symbolizer.Profile {
	p := handProfile()
	p.Samples[1].OffCPUNanos = 40e6
	p.Samples[1].Count++
	p.Samples = append(p.Samples, &symbolizer.Sample{Locs: []int{1}, Count: 1, OffCPUNanos: 5e6})
	return p
}

// TestOffCPUExports: folded with OffCPUNanos lists only stacks that
// waited, with their nanoseconds; CPUNanos leaves out the stack seen only
// off CPU; pprof gets a third sample type, off-cpu nanoseconds, only when
// the profile has off-CPU time, so on-CPU profiles keep their two.
func TestOffCPUExports(t *testing.T) {
	var b bytes.Buffer
	if err := folded.Write(&b, offCPUProfile(), folded.OffCPUNanos); err != nil {
		t.Fatal(err)
	}
	golden(t, "folded-offcpu.golden", b.Bytes())
	b.Reset()
	folded.Write(&b, offCPUProfile(), folded.CPUNanos)
	golden(t, "folded-cpu.golden", b.Bytes())

	for _, tc := range []struct {
		p     *symbolizer.Profile
		types int
		off   int64
	}{{handProfile(), 2, 0}, {offCPUProfile(), 3, 45e6}} {
		b.Reset()
		if err := pprof.Write(&b, tc.p); err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(&b)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.CheckValid(); err != nil {
			t.Fatal(err)
		}
		if len(p.SampleType) != tc.types {
			t.Fatalf("%d sample types, want %d", len(p.SampleType), tc.types)
		}
		if tc.types < 3 {
			continue
		}
		if st := p.SampleType[2]; st.Type != "off_cpu" || st.Unit != "nanoseconds" {
			t.Errorf("third sample type %s/%s, want off_cpu/nanoseconds", st.Type, st.Unit)
		}
		var off int64
		for _, s := range p.Sample {
			off += s.Value[2]
		}
		if off != tc.off {
			t.Errorf("off-CPU total %d, want %d", off, tc.off)
		}
	}
}
