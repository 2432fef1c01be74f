package tracer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	pprofexport "github.com/rawstack/rawstack/symbolizer/export/pprof"
)

// labelSplit symbolizes a trace, exports it to pprof, re-reads the pprof
// bytes and returns the samples labelled phase=a and phase=b, and how many
// distinct goroutines carried each label.
func labelSplit(t *testing.T, trace []byte) (a, b int64, goroutines map[string]map[int64]bool, p *profile.Profile) {
	t.Helper()
	r, err := format.NewReader(bytes.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	prof, err := symbolizer.Build(r, &symbolizer.Options{NoDebuginfod: true})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := pprofexport.Write(&buf, prof); err != nil {
		t.Fatal(err)
	}
	p, err = profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	goroutines = map[string]map[int64]bool{"a": {}, "b": {}}
	for _, s := range p.Sample {
		ph := s.Label["phase"]
		if len(ph) != 1 {
			continue
		}
		switch ph[0] { // CPU ns: in frequency mode the kernel varies the period
		case "a":
			a += s.Value[1]
		case "b":
			b += s.Value[1]
		default:
			continue
		}
		for _, g := range s.NumLabel["goroutine"] {
			goroutines[ph[0]][g] = true
		}
	}
	return a, b, goroutines, p
}

// checkSplit compares the labelled fraction with the CPU time the
// goroutines measured themselves.
func checkSplit(t *testing.T, a, b, trueA, trueB int64, gs map[string]map[int64]bool) {
	t.Helper()
	if a+b < 200e6 {
		t.Fatalf("%d ns of samples labelled phase=a, %d phase=b: too few to split", a, b)
	}
	got := float64(a) / float64(a+b)
	want := float64(trueA) / float64(trueA+trueB)
	t.Logf("phase=a: %d ns of samples, phase=b: %d; fraction a %.3f, true %.3f (%d / %d ns of thread CPU)", a, b, got, want, trueA, trueB)
	// 0.05, or four standard errors of a share of samples of about 1 ms
	// each where that is more (0.051 off at 985 samples failed once in
	// CI: 3.4 of them).
	n := float64(a+b) / 1e6
	if tol := math.Max(0.05, 4*math.Sqrt(want*(1-want)/n)); math.Abs(got-want) > tol {
		t.Errorf("fraction of phase=a samples %.3f, the goroutines' own CPU times say %.3f (tolerance %.3f)", got, want, tol)
	}
	if len(gs["a"]) != 1 || len(gs["b"]) != 1 {
		t.Errorf("goroutines per label: %v, want one each", gs)
	}
	for ga := range gs["a"] {
		if gs["b"][ga] {
			t.Errorf("goroutine %d carries both labels", ga)
		}
	}
}

// TestGoroutineLabelsOfCommand records the labelled fixture from outside:
// the goroutine comes from each sample's user registers (R14) and the
// target's memory.
func TestGoroutineLabelsOfCommand(t *testing.T) {
	needPerf(t)
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		testbuild.Impossible(t, "g-register")
	}
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool: "go", Args: []string{"build", "-o", "{dir}/labelled", "."},
		Inputs: []string{"testdata/labelled"}, Out: "labelled",
		Env: []string{"CGO_ENABLED=0", "GOFLAGS="}, Dir: mustAbs(t, "testdata/labelled"),
	})
	for _, mode := range []UnwindMode{UnwindFP, UnwindDWARF} {
		t.Run(mode.String(), func(t *testing.T) {
			var out, stdout bytes.Buffer
			cmd := exec.Command(bin, "0.6")
			cmd.Stdout = &stdout
			tr, err := Start(context.Background(), Options{Frequency: 999, Command: cmd, Streams: []io.Writer{&out}, Goroutines: true, Unwind: mode})
			if err != nil {
				t.Fatal(err)
			}
			// A stream joining once label sets exist gets them replayed.
			var late bytes.Buffer
			for deadline := time.Now().Add(30 * time.Second); tr.Stats().Samples < 300; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no samples within 30 s")
				}
			}
			if err := tr.AddStream(&late); err != nil {
				t.Fatal(err)
			}
			if err := tr.Wait(); err != nil {
				t.Fatal(err)
			}
			if la, lb, _, _ := labelSplit(t, late.Bytes()); la+lb == 0 {
				t.Error("the stream that joined late has no labelled samples")
			}
			var trueA, trueB int64
			if _, err := fmt.Sscanf(stdout.String(), "split a=%d b=%d", &trueA, &trueB); err != nil {
				t.Fatalf("fixture printed %q: %v", stdout.String(), err)
			}
			a, b, gs, _ := labelSplit(t, out.Bytes())
			checkSplit(t, a, b, trueA, trueB, gs)
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd + "/" + p
}

// TestGoroutineLabelsSelf runs a program that profiles itself with the
// tracer: the goroutine of each sample is read from the tracer's own
// process, whose layout the tracer learns by itself: again from a binary
// built -ldflags="-s -w", without DWARF.
func TestGoroutineLabelsSelf(t *testing.T) {
	t.Run("dwarf", func(t *testing.T) { goroutineLabelsSelf(t, nil) })
	t.Run("-s-w", func(t *testing.T) { goroutineLabelsSelf(t, []string{"-ldflags=-s -w"}) })
}

func goroutineLabelsSelf(t *testing.T, flags []string) {
	needPerf(t)
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		testbuild.Impossible(t, "g-register")
	}
	// The fixture links the tracer: every package it builds from keys the
	// cache.
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool: "go", Args: append(append([]string{"build"}, flags...), "-o", "{dir}/selflabelled", "."),
		Inputs: []string{"testdata/selflabelled", ".", "../platform", "../format", "../internal", "../arch", "../go.mod", "../go.sum"},
		Out:    "selflabelled",
		Env:    []string{"CGO_ENABLED=0", "GOFLAGS="}, Dir: mustAbs(t, "testdata/selflabelled"),
	})
	trace := t.TempDir() + "/self.rawstack"
	cmd := exec.Command(bin, trace)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	// needPerf saw perf_event_open work in this process: the fixture's
	// tracer.Start failing too (its exit 3) is a failure, not a skip.
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 {
		t.Fatalf("the fixture's tracer.Start failed: %s", stderr.String())
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.String())
	}
	var trueA, trueB int64
	if _, err := fmt.Sscanf(string(out), "split a=%d b=%d", &trueA, &trueB); err != nil {
		t.Fatalf("fixture printed %q: %v", out, err)
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	a, b, gs, _ := labelSplit(t, data)
	checkSplit(t, a, b, trueA, trueB, gs)
}
