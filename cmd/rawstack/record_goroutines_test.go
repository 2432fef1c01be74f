package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// TestRecordGoroutinesPprofTags records two goroutines labelled with
// runtime/pprof.Do, converts the trace to pprof and asks go tool pprof
// -tags for the time per label: it must split as the goroutines' own
// thread CPU times do, within 5 points.
func TestRecordGoroutinesPprofTags(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	goTool := testbuild.Need(t, "go", "go tool pprof is the oracle")
	src, _ := filepath.Abs("../../tracer/testdata/labelled")
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool: "go", Args: []string{"build", "-o", "{dir}/labelled", "."},
		Inputs: []string{src}, Out: "labelled", Env: []string{"CGO_ENABLED=0", "GOFLAGS="}, Dir: src,
	})
	dir := t.TempDir()
	trace, prof, split := filepath.Join(dir, "t.rawstack"), filepath.Join(dir, "t.pb.gz"), filepath.Join(dir, "split")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"record", "--goroutines", "-q", "-o", trace, "--", bin, "0.6", split}, &stdout, &stderr); code != 0 {
		t.Fatalf("record exited %d: %s", code, stderr.String())
	}
	if code := run([]string{"convert", trace, "--to", "pprof", "-o", prof}, &stdout, &stderr); code != 0 {
		t.Fatalf("convert exited %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(split)
	if err != nil {
		t.Fatal(err)
	}
	var trueA, trueB float64
	if _, err := fmt.Sscanf(string(b), "split a=%g b=%g", &trueA, &trueB); err != nil {
		t.Fatalf("fixture wrote %q: %v", b, err)
	}
	out, err := exec.Command(goTool, "tool", "pprof", "-tags", prof).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -tags: %v\n%s", err, out)
	}
	// "  601.60ms (61.39%): a"
	ms := map[string]float64{}
	for _, m := range regexp.MustCompile(`(?m)^\s+([\d.]+)(ms|s) \(\s*[\d.]+%\): (a|b)$`).FindAllStringSubmatch(string(out), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		if m[2] == "s" {
			v *= 1000
		}
		ms[m[3]] += v
	}
	if ms["a"]+ms["b"] < 200 {
		t.Fatalf("go tool pprof -tags shows %v ms per phase label:\n%s", ms, out)
	}
	got, want := ms["a"]/(ms["a"]+ms["b"]), trueA/(trueA+trueB)
	t.Logf("pprof -tags: phase=a %.1f ms, phase=b %.1f ms: fraction %.3f, true %.3f", ms["a"], ms["b"], got, want)
	if math.Abs(got-want) > 0.05 {
		t.Errorf("phase=a fraction %.3f in go tool pprof, %.3f by the goroutines' own CPU time\n%s", got, want, out)
	}
	if !regexp.MustCompile(`(?m)^ goroutine: Total`).Match(out) {
		t.Errorf("no goroutine tag in go tool pprof -tags:\n%s", out)
	}
}

// TestRecordGoroutinesNoDWARF records a Go program built -ldflags="-s -w"
// with --goroutines: out of process the goroutines' layout comes from
// DWARF, which it lacks, so the summary line must say that goroutines and
// labels were not read (stacks and symbols were), never stay silent.
func TestRecordGoroutinesNoDWARF(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	src, _ := filepath.Abs("../../tracer/testdata/labelled")
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool: "go", Args: []string{"build", "-ldflags=-s -w", "-o", "{dir}/labelled", "."},
		Inputs: []string{src}, Out: "labelled", Env: []string{"CGO_ENABLED=0", "GOFLAGS="}, Dir: src,
	})
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.rawstack")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"record", "--goroutines", "-q", "-o", trace, "--", bin, "0.2", filepath.Join(dir, "split")}, &stdout, &stderr); code != 0 {
		t.Fatalf("record exited %d: %s", code, stderr.String())
	}
	t.Logf("%s", stderr.String())
	if !regexp.MustCompile(`samples, 0 with their goroutine; goroutines and labels not read, stacks and symbols are: pid \d+: .*no DWARF`).MatchString(stderr.String()) {
		t.Errorf("the summary does not say the goroutines were not read:\n%s", stderr.String())
	}
}
