package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// TestRecordAlloc runs the CLI end to end: record --alloc a C program
// that allocates and frees 1 GiB in main → churn and keeps 128 MiB in
// main → keep, then convert --to folded --value alloc_space and
// inuse_space: those chains carry those figures ±15%. With --alloc's
// default back end (eBPF) and with --backend perf.
func TestRecordAlloc(t *testing.T) {
	t.Run("ebpf", func(t *testing.T) {
		testbuild.Feature(t, linux.ProbeBPF())
		recordAlloc(t)
	})
	t.Run("perf", func(t *testing.T) {
		testbuild.Feature(t, linux.Probe())
		if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
			// The sampler is built for x86-64 and arm64 only: the
			// cell is refused with the option's error, not recorded
			// empty.
			var so, se bytes.Buffer
			args := []string{"record", "-q", "--alloc", "--backend", "perf", "-o", filepath.Join(t.TempDir(), "t"), "--", "true"}
			if code := run(args, &so, &se); code != 2 || !strings.Contains(se.String(), "option Alloc is not supported by the perf back end") {
				t.Fatalf("%q on %s: exit %d (%s), want 2 and the option's error", args, runtime.GOARCH, code, se.String())
			}
			return
		}
		recordAlloc(t, "--backend", "perf")
	})
}

func recordAlloc(t *testing.T, flags ...string) {
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-g", "-fomit-frame-pointer", "-o", "{dir}/allocs", "{in0}"},
		Inputs: []string{"../../tracer/testdata/allocs.c"},
		Out:    "allocs",
	})
	dir := t.TempDir()
	out := filepath.Join(dir, "t.rawstack")
	var stdout, stderr bytes.Buffer
	args := append(append([]string{"record", "-q", "--alloc", "-o", out}, flags...), "--", bin)
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("%q exited %d: %s", args, code, stderr.String())
	}
	sum := func(value, chain string) int64 {
		t.Helper()
		var so, se bytes.Buffer
		if code := run([]string{"convert", out, "--to", "folded", "--value", value, "--no-debuginfod"}, &so, &se); code != 0 {
			t.Fatalf("convert --value %s exited %d: %s", value, code, se.String())
		}
		var n int64
		for _, line := range strings.Split(strings.TrimSpace(so.String()), "\n") {
			sp := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseInt(line[sp+1:], 10, 64)
			if err != nil {
				t.Fatalf("folded line %q", line)
			}
			if strings.Contains(line[:sp], chain) {
				n += v
			}
		}
		return n
	}
	for _, c := range []struct {
		value, chain string
		want         int64
	}{
		{"alloc_space", "main;churn;", 1 << 30},
		{"inuse_space", "main;keep;", 128 << 20},
		{"alloc_space", "main;keep;", 128 << 20},
	} {
		got := sum(c.value, c.chain)
		t.Logf("%s of %s: %.1f MiB", c.value, c.chain, float64(got)/(1<<20))
		if float64(got) < 0.85*float64(c.want) || float64(got) > 1.15*float64(c.want) {
			t.Errorf("%s of %s = %d, want %d ±15%%", c.value, c.chain, got, c.want)
		}
	}
	if churn := sum("inuse_space", "main;churn;"); churn > 16<<20 {
		t.Errorf("inuse_space of main;churn = %d: it frees every block", churn)
	}
	// The sampler's own frames (its module) never reach the output: a
	// stack ends at the allocator's entry.
	if n := sum("alloc_space", "librawstack-alloc"); n != 0 {
		t.Errorf("%d bytes allocated in stacks with the sampler's frames", n)
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
}

func TestRecordAllocUsage(t *testing.T) {
	for _, args := range [][]string{
		{"record", "--alloc-rate", "4096", "--", "true"},          // --alloc-rate needs --alloc
		{"record", "--alloc", "--alloc-rate", "-1", "--", "true"}, // a positive rate
	} {
		var so, se bytes.Buffer
		if code := run(args, &so, &se); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, se.String())
		}
	}
}
