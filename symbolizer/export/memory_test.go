package export_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/folded"
	"github.com/rawstack/rawstack/symbolizer/export/pprof"
)

// memoryStream is a trace of two allocation sites written by hand:
// stack 1 (0x1000 called from 0x2000) allocates two sampled blocks and
// frees one, stack 2 (0x3000 from 0x2000) reports per-stack totals as
// the Go runtime's heap profile does. One free names an address no
// sample holds.
func memoryStream(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{PointerSize: 8, OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const pid = 7
	w.WriteStack(1, []uint64{0x1000, 0x2000})
	w.WriteStack(2, []uint64{0x3000, 0x2000})
	w.WriteSample(format.Sample{Time: 10, Pid: pid, Tid: pid, CPU: 0, Weight: 1_000_000, Stack: 1})
	w.WriteAlloc(format.Alloc{Time: 20, Pid: pid, Tid: pid, Stack: 1, Addr: 0xa000, Bytes: 1000, Objects: 2})
	w.WriteAlloc(format.Alloc{Time: 30, Pid: pid, Tid: pid, Stack: 1, Addr: 0xb000, Bytes: 500, Objects: 1})
	w.WriteFree(format.Free{Time: 40, Pid: pid, Tid: pid, Addr: 0xa000})
	w.WriteFree(format.Free{Time: 50, Pid: pid, Tid: pid, Addr: 0xc000})
	w.WriteAlloc(format.Alloc{Time: 60, Pid: pid, Stack: 2, Bytes: 4096, Objects: 4})
	w.WriteFree(format.Free{Time: 70, Pid: pid, Stack: 2, Bytes: 1024, Objects: 1})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func buildMemory(t *testing.T, timeline bool) *symbolizer.Profile {
	t.Helper()
	r, err := format.NewReader(bytes.NewReader(memoryStream(t)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := symbolizer.Build(r, &symbolizer.Options{Timeline: timeline})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMemoryFolded(t *testing.T) {
	p := buildMemory(t, false)
	if !p.Memory || p.UnmatchedFrees != 1 {
		t.Errorf("Memory %v UnmatchedFrees %d, want true 1", p.Memory, p.UnmatchedFrees)
	}
	want := map[folded.Value]string{
		folded.Samples:      "0x2000;0x1000 1\n",
		folded.CPUNanos:     "0x2000;0x1000 1000000\n",
		folded.AllocSpace:   "0x2000;0x1000 1500\n0x2000;0x3000 4096\n",
		folded.AllocObjects: "0x2000;0x1000 3\n0x2000;0x3000 4\n",
		folded.InuseSpace:   "0x2000;0x1000 500\n0x2000;0x3000 3072\n",
		folded.InuseObjects: "0x2000;0x1000 1\n0x2000;0x3000 3\n",
	}
	for v, w := range want {
		var b strings.Builder
		if err := folded.Write(&b, p, v); err != nil {
			t.Fatal(err)
		}
		if b.String() != w {
			t.Errorf("value %d:\ngot:\n%swant:\n%s", v, b.String(), w)
		}
	}
	if err := folded.Write(&strings.Builder{}, handProfile(), folded.InuseSpace); err != folded.ErrNoMemory {
		t.Errorf("inuse_space of a CPU profile: %v, want ErrNoMemory", err)
	}
}

// TestMemoryPprof: the four heap sample types, named and ordered as
// runtime/pprof's, beside the CPU ones, with cpu the default view.
func TestMemoryPprof(t *testing.T) {
	var b bytes.Buffer
	if err := pprof.Write(&b, buildMemory(t, false)); err != nil {
		t.Fatal(err)
	}
	prof, err := profile.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, st := range prof.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if got, want := strings.Join(types, " "), "samples/count cpu/nanoseconds alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes"; got != want {
		t.Fatalf("sample types %q, want %q", got, want)
	}
	if prof.DefaultSampleType != "cpu" {
		t.Errorf("default sample type %q, want cpu", prof.DefaultSampleType)
	}
	got := map[uint64][]int64{} // leaf address → values
	for _, s := range prof.Sample {
		got[s.Location[0].Address] = s.Value
	}
	want := map[uint64][]int64{0x1000: {1, 1_000_000, 3, 1500, 1, 500}, 0x3000: {0, 0, 4, 4096, 3, 3072}}
	for leaf, w := range want {
		if g := got[leaf]; len(g) != len(w) || !equal(g, w) {
			t.Errorf("values at %#x: %v, want %v", leaf, g, w)
		}
	}
}

func equal(a, b []int64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// TestMemoryTimelineCounter: the timeline carries the process's sampled
// in-use bytes over time.
func TestMemoryTimelineCounter(t *testing.T) {
	p := buildMemory(t, true)
	var c *symbolizer.CounterTrack
	for _, x := range p.Timeline.Counters {
		if x.Name == "in-use bytes (pid 7)" {
			c = x
		}
	}
	if c == nil {
		t.Fatalf("no in-use counter among %d", len(p.Timeline.Counters))
	}
	var vals []float64
	for _, pt := range c.Points {
		vals = append(vals, pt.Value)
	}
	want := []float64{1000, 1500, 500, 4596, 3572}
	if len(vals) != len(want) {
		t.Fatalf("in-use points %v, want %v", vals, want)
	}
	for i := range want {
		if vals[i] != want[i] {
			t.Fatalf("in-use points %v, want %v", vals, want)
		}
	}
}
