//go:build linux

package tracer

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	rpprof "runtime/pprof"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/export/pprof"
)

var (
	heapSink []byte   // what heapChurn allocated last; dropped at once
	heapKept [][]byte // what heapKeep keeps
)

// heapChurn allocates 512 MiB in 64 KiB blocks, each dropped at once:
// allocated, not in use.
//
//go:noinline
func heapChurn() {
	for i := 0; i < 8192; i++ {
		heapSink = make([]byte, 64<<10)
	}
	heapSink = nil
}

// heapKeep allocates 64 MiB in 1 MiB blocks and keeps them.
//
//go:noinline
func heapKeep() {
	for i := 0; i < 64; i++ {
		heapKept = append(heapKept, make([]byte, 1<<20))
	}
}

// TestHeap: a Go program under Heap: true that allocates 512 MiB in one
// function and keeps 64 MiB in another gives those figures, ±15%, as
// alloc_space of the first and inuse_space of the second, at the
// runtime's default MemProfileRate; and go tool pprof
// -sample_index=inuse_space names the keeping function first.
func TestHeap(t *testing.T) {
	needPerf(t)
	if runtime.MemProfileRate != 512<<10 {
		t.Fatalf("MemProfileRate %d: the test's figures assume the default 512 KiB", runtime.MemProfileRate)
	}
	var out bytes.Buffer
	tr, err := Start(context.Background(), Options{Streams: []io.Writer{&out}, Heap: true, HeapInterval: 50_000_000})
	if err != nil {
		t.Fatal(err)
	}
	heapChurn()
	heapKeep()
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	// runtime/pprof's own heap profile, taken now, is the oracle of the
	// in-use figures: the same records, scaled the same way.
	var goHeap bytes.Buffer
	if err := rpprof.Lookup("heap").WriteTo(&goHeap, 0); err != nil {
		t.Fatal(err)
	}
	p := symbolize(t, out.Bytes())
	heapKept = nil
	if !p.Memory {
		t.Fatal("the trace has no allocation samples")
	}
	// Sum per leaf function: the site of each allocation.
	type fig struct{ allocBytes, inuseBytes, allocObjects int64 }
	by := map[string]*fig{}
	for _, s := range p.Samples {
		if len(s.Locs) == 0 {
			continue
		}
		// The leaf is the function that allocated: the runtime's
		// frames (mallocgc, makeslice) are hidden as runtime/pprof
		// hides them.
		fn := p.Locations[s.Locs[0]].FunctionName(0)
		f := by[fn]
		if f == nil {
			f = &fig{}
			by[fn] = f
		}
		f.allocBytes += s.AllocBytes
		f.inuseBytes += s.InuseBytes
		f.allocObjects += s.AllocObjects
	}
	churn, keep := by[pkgPath+".heapChurn"], by[pkgPath+".heapKeep"]
	if churn == nil || keep == nil {
		t.Fatalf("no allocation samples in heapChurn or heapKeep: %v", by)
	}
	t.Logf("heapChurn: alloc_space %d MiB (%d objects), inuse_space %d MiB; heapKeep: alloc_space %d MiB, inuse_space %d MiB",
		churn.allocBytes>>20, churn.allocObjects, churn.inuseBytes>>20, keep.allocBytes>>20, keep.inuseBytes>>20)
	within := func(what string, got, want int64) {
		t.Helper()
		if float64(got) < 0.85*float64(want) || float64(got) > 1.15*float64(want) {
			t.Errorf("%s = %d bytes (%.1f MiB), want %d ±15%%", what, got, float64(got)/(1<<20), want)
		}
	}
	within("heapChurn alloc_space", churn.allocBytes, 512<<20)
	within("heapKeep alloc_space", keep.allocBytes, 64<<20)
	within("heapKeep inuse_space", keep.inuseBytes, 64<<20)
	if churn.inuseBytes > 4<<20 {
		t.Errorf("heapChurn inuse_space %d bytes: it keeps nothing", churn.inuseBytes)
	}
	gp, err := profile.Parse(&goHeap)
	if err != nil {
		t.Fatal(err)
	}
	inuse := -1
	for i, st := range gp.SampleType {
		if st.Type == "inuse_space" {
			inuse = i
		}
	}
	var goKeep int64
	for _, s := range gp.Sample {
		if len(s.Location) > 0 && len(s.Location[0].Line) > 0 && s.Location[0].Line[0].Function.Name == pkgPath+".heapKeep" {
			goKeep += s.Value[inuse]
		}
	}
	if d := keep.inuseBytes - goKeep; d < -goKeep/100 || d > goKeep/100 {
		t.Errorf("heapKeep inuse_space %d, runtime/pprof's %d", keep.inuseBytes, goKeep)
	}

	// go tool pprof reads the four heap sample types and names heapKeep
	// first by inuse_space.
	goTool := testbuild.Need(t, "go", "go tool pprof reads the converted profile")
	prof := filepath.Join(t.TempDir(), "heap.pb.gz")
	f, err := os.Create(prof)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.Write(f, p); err != nil {
		t.Fatal(err)
	}
	f.Close()
	top, err := exec.Command(goTool, "tool", "pprof", "-top", "-sample_index=inuse_space", prof).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, top)
	}
	first := firstTopRow(string(top))
	if !strings.Contains(first, "heapKeep") {
		t.Errorf("go tool pprof -top -sample_index=inuse_space: first row %q, want heapKeep\n%s", first, top)
	}
}

// pkgPath is the import path functions of this package are named with.
const pkgPath = "github.com/rawstack/rawstack/tracer"

// firstTopRow returns the first function row of go tool pprof -top.
func firstTopRow(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "flat%") && i+1 < len(lines) {
			return strings.TrimSpace(lines[i+1])
		}
	}
	return ""
}
