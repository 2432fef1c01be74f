package otelspan_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
	"github.com/rawstack/rawstack/symbolizer"
)

// TestCgoLinks: C code called through cgo inside a linked span keeps the
// goroutine's g register (callee-saved in C), so its samples follow the
// goroutine: two goroutines on two Ps, not locked, each in its own span,
// each spending it in a C loop with Go yields between the calls; the
// samples in the C loop under each goroutine's function must be linked
// to its own span.
func TestCgoLinks(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	testbuild.Need(t, "gcc", "cgo builds the fixture's C function")
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool: "go", Args: []string{"build", "-o", "{dir}/cgospan", "."},
		Inputs: []string{"testdata/cgospan", ".", "..", "../../platform", "../../format", "../../internal", "../../arch", "../../go.mod", "../../go.sum"},
		Out:    "cgospan",
		Env:    []string{"CGO_ENABLED=1", "GOFLAGS="}, Dir: mustAbs(t, "testdata/cgospan"),
	})
	trace := filepath.Join(t.TempDir(), "cgo.rawstack")
	cmd := exec.Command(bin, trace)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.String())
	}
	spans := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var fn, sid string
		if _, err := fmt.Sscanf(l, "span %s %s", &fn, &sid); err != nil {
			t.Fatalf("fixture printed %q", l)
		}
		spans[sid] = fn
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	shares := map[string]*share{}
	for _, s := range pprofOf(t, data).Sample {
		inC, fn := false, ""
		for _, l := range s.Location {
			for _, ln := range l.Line {
				switch n := ln.Function.Name; {
				case n == "spin_c":
					inC = true
				case n == "main.cgoA" || n == "main.cgoB":
					fn = n
				}
			}
		}
		if !inC || fn == "" {
			continue
		}
		if shares[fn] == nil {
			shares[fn] = &share{}
		}
		shares[fn].total += s.Value[0]
		if sids := s.Label[symbolizer.LabelSpanID]; len(sids) == 1 && spans[sids[0]] == fn {
			shares[fn].linked += s.Value[0]
		}
	}
	for _, fn := range []string{"main.cgoA", "main.cgoB"} {
		s := shares[fn]
		if s == nil || s.total < 30 {
			t.Fatalf("%s: %v samples in spin_c: too few to tell", fn, s)
		}
		got := float64(s.linked) / float64(s.total)
		t.Logf("%s: %d of %d samples in C linked to its own span (%.3f)", fn, s.linked, s.total, got)
		if got < minLinkedShare {
			t.Errorf("%s: %.3f of its samples in C linked to its own span, want >= %.2f", fn, got, minLinkedShare)
		}
	}
}
