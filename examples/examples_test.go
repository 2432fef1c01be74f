// Package examples_test builds every example and runs those that finish
// quickly, so the examples the README points to keep working.
package examples_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux"
)

// TestExamples builds each example and runs the brief ones with short
// durations; liveprofile is a server and is only built.
func TestExamples(t *testing.T) {
	dir := t.TempDir()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		bin := filepath.Join(dir, e.Name())
		if b, err := exec.Command("go", "build", "-o", bin, "./"+e.Name()).CombinedOutput(); err != nil {
			t.Errorf("go build ./examples/%s: %v\n%s", e.Name(), err, b)
		}
		bins[e.Name()] = bin
	}
	if len(bins) < 4 {
		t.Fatalf("only %d examples found", len(bins))
	}
	runs := map[string][]string{
		"busy":        {"-d", "200ms"},
		"selfprofile": {"-d", "300ms", "-o", filepath.Join(dir, "self.rawstack")},
		"spans":       {"-d", "300ms", "-o", filepath.Join(dir, "spans.rawstack"), "-perfetto", filepath.Join(dir, "spans.pftrace")},
	}
	tracing := linux.Probe()
	for name, args := range runs {
		if name != "busy" && tracing != nil {
			if errors.Is(tracing, platform.ErrNotSupported) {
				t.Logf("not running %s: %v", name, tracing)
				continue
			}
			t.Fatal(tracing)
		}
		if b, err := exec.Command(bins[name], args...).CombinedOutput(); err != nil {
			t.Errorf("examples/%s %v: %v\n%s", name, args, err, b)
		}
	}
	if tracing == nil {
		for _, f := range []string{"self.rawstack", "spans.rawstack", "spans.pftrace"} {
			if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
				t.Errorf("%s not written: %v", f, err)
			}
		}
		// The example symbolizes its own trace: its functions and spans
		// are named in the Perfetto trace.
		b, _ := os.ReadFile(filepath.Join(dir, "spans.pftrace"))
		for _, name := range []string{"main.parse", "main.compute", "request"} {
			if !bytes.Contains(b, []byte(name)) {
				t.Errorf("spans.pftrace does not name %s", name)
			}
		}
	}
}
