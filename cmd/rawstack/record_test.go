package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// buildChain compiles the tracer's main→a→b→c fixture, cached by the
// shared fixture builder.
func buildChain(t *testing.T) string {
	t.Helper()
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-fno-omit-frame-pointer", "-o", "{dir}/chain", "{in0}"},
		Inputs: []string{"../../tracer/testdata/chain.c"},
		Out:    "chain",
	})
}

func TestRecordCommand(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	bin := buildChain(t)
	out := filepath.Join(t.TempDir(), "t.rawstack")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"record", "-o", out, "-F", "499", "--", bin, "0.5"}, &stdout, &stderr); code != 0 {
		t.Fatalf("record exited %d: %s", code, stderr.String())
	}
	summary := stderr.String()
	t.Log(summary)
	for _, w := range []string{"samples", "lost", "threads", "modules", "bytes"} {
		if !strings.Contains(summary, w) {
			t.Errorf("summary lacks %q: %s", w, summary)
		}
	}
	kinds := countKinds(t, out)
	if kinds[format.KindSample] < 50 || kinds[format.KindProcessEnd] != 1 || kinds[format.KindModuleLoad] < 3 || kinds[format.KindClockSync] == 0 {
		t.Errorf("unexpected event counts %v", kinds)
	}
}

func TestRecordUsage(t *testing.T) {
	for _, args := range [][]string{
		{"record"},
		{"record", "-p", "1", "--", "true"},
		{"record", "--duration", "1s", "--", "true"},
	} {
		var so, se bytes.Buffer
		if code := run(args, &so, &se); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, se.String())
		}
	}
}

func TestRecordPidDuration(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	bin := buildChain(t)
	target := exec.Command(bin, "30")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		target.Process.Kill()
		target.Wait()
	}()
	out := filepath.Join(t.TempDir(), "p.rawstack")
	var stdout, stderr bytes.Buffer
	start := time.Now()
	if code := run([]string{"record", "-o", out, "-p", strconv.Itoa(target.Process.Pid), "--duration", "500ms"}, &stdout, &stderr); code != 0 {
		t.Fatalf("record exited %d: %s", code, stderr.String())
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("--duration 500ms took %v", d)
	}
	t.Log(stderr.String())
	if !strings.Contains(stderr.String(), " samples") || strings.Contains(stderr.String(), " 0 samples") {
		t.Errorf("no samples recorded: %s", stderr.String())
	}
}
