package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
	_ "github.com/rawstack/rawstack/platform/linux/ebpf" // in-process here; the rawstack binary runs rawstack-ebpf
)

// TestRecordEBPFOffCPU runs the CLI end to end as the issue asks:
// record --backend ebpf --off-cpu a program that sleeps 4 × 150 ms in
// main → waiter → nap, then convert --to folded --value offcpu: that
// stack's nanoseconds are within 10% of what the program measured.
func TestRecordEBPFOffCPU(t *testing.T) {
	testbuild.Feature(t, linux.ProbeBPF())
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-fomit-frame-pointer", "-o", "{dir}/ebpf_sleep", "{in0}"},
		Inputs: []string{"../../tracer/testdata/ebpf_sleep.c"},
		Out:    "ebpf_sleep",
	})
	dir := t.TempDir()
	out := filepath.Join(dir, "t.rawstack")
	var stdout, stderr bytes.Buffer
	args := []string{"record", "-q", "--backend", "ebpf", "--off-cpu", "-F", "99", "-o", out, "--", bin, "0.15", "4"}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("%q exited %d: %s", args, code, stderr.String())
	}
	slept, err := strconv.ParseInt(strings.TrimSpace(stdout.String()), 10, 64)
	if err != nil {
		t.Fatalf("fixture output %q: %v", stdout.String(), err)
	}
	folded := filepath.Join(dir, "t.folded")
	stderr.Reset()
	if code := run([]string{"convert", out, "--to", "folded", "--value", "offcpu", "--no-debuginfod", "-o", folded}, &stdout, &stderr); code != 0 {
		t.Fatalf("convert exited %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	var nap int64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sp := strings.LastIndexByte(line, ' ')
		n, err := strconv.ParseInt(line[sp+1:], 10, 64)
		if err != nil {
			t.Fatalf("folded line %q", line)
		}
		if strings.Contains(line[:sp], ";main;waiter;nap;") {
			nap += n
		}
	}
	t.Logf("slept %d ns; folded --value offcpu gives main;waiter;nap %d ns", slept, nap)
	if d := float64(nap-slept) / float64(slept); d < -0.1 || d > 0.1 {
		t.Errorf("off-CPU ns in main;waiter;nap: %d, %.1f%% off the %d slept\n%s", nap, 100*d, slept, b)
	}
}

func TestRecordEBPFUsage(t *testing.T) {
	for _, args := range [][]string{
		{"record", "-a", "--duration", "1s"},                // -a needs --backend ebpf
		{"record", "--off-cpu", "--", "true"},               // so does --off-cpu
		{"record", "--backend", "bpf", "--", "true"},        // unknown back end
		{"record", "--backend", "ebpf", "-a", "--", "true"}, // -a and a command
		{"record", "--backend", "ebpf", "-a", "-p", "1"},    // -a and -p
	} {
		var so, se bytes.Buffer
		if code := run(args, &so, &se); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, se.String())
		}
	}
}
