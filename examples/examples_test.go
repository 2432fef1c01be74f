// Package examples_test builds every example and runs those that finish
// quickly, so the examples the README points to keep working.
package examples_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
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
	runs := []struct {
		name string
		args []string
	}{
		{"busy", []string{"-d", "200ms"}},
		{"selfprofile", []string{"-d", "300ms", "-o", filepath.Join(dir, "self.rawstack")}},
		{"spans", []string{"-d", "300ms", "-o", filepath.Join(dir, "spans.rawstack"), "-perfetto", filepath.Join(dir, "spans.pftrace")}},
	}
	for _, r := range runs {
		if r.name != "busy" {
			// The other examples record: where perf_event_open is missing
			// or not permitted the prerequisite is missing (a failure
			// under CI=true); any other probe error fails, and so does
			// an example that exits non-zero or records no sample.
			testbuild.Feature(t, linux.Probe())
		}
		b, err := exec.Command(bins[r.name], r.args...).CombinedOutput()
		if err != nil {
			t.Errorf("examples/%s %v: %v\n%s", r.name, r.args, err, b)
			continue
		}
		if r.name != "busy" {
			m := regexp.MustCompile(`: (\d+) samples`).FindSubmatch(b)
			if m == nil || string(m[1]) == "0" {
				t.Errorf("examples/%s recorded no samples:\n%s", r.name, b)
			}
		}
	}
	for _, f := range []string{"self.rawstack", "spans.rawstack", "spans.pftrace"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	// The example symbolizes its own trace: its functions and spans are
	// named in the Perfetto trace.
	b, _ := os.ReadFile(filepath.Join(dir, "spans.pftrace"))
	for _, name := range []string{"main.parse", "main.compute", "request"} {
		if !bytes.Contains(b, []byte(name)) {
			t.Errorf("spans.pftrace does not name %s", name)
		}
	}
}
