package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// TestRecordDWARF records a program built without frame pointers with
// --unwind dwarf, online and with --keep-raw, and checks with convert
// --to folded that the chain main;a;b;c;d;e;leaf is there in nearly every
// sample either way.
func TestRecordDWARF(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	cc, err := exec.LookPath("cc")
	if err != nil {
		testbuild.Skip(t, "no C compiler (cc) to build the fixture")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "dwarfchain")
	if b, err := exec.Command(cc, "-O2", "-fomit-frame-pointer", "-o", bin, "../../tracer/testdata/dwarfchain.c").CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, b)
	}
	for _, extra := range [][]string{nil, {"--keep-raw", "--stack-size", "4096"}} {
		out := filepath.Join(dir, "t.rawstack")
		args := append(append([]string{"record", "-q", "-o", out, "-F", "499", "--unwind", "dwarf"}, extra...), "--", bin, "0.5")
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%q exited %d: %s", args, code, stderr.String())
		}
		share, all := foldedShare(t, out, ";main;a;b;c;d;e;leaf")
		t.Logf("%q: %.1f%% of %d samples hold main;a;b;c;d;e;leaf", extra, 100*share, all)
		if all < 100 || share < 0.95 {
			t.Errorf("%q: %.1f%% of %d samples hold main;a;b;c;d;e;leaf, want ≥ 95%%", extra, 100*share, all)
		}
	}
}

func TestRecordDWARFUsage(t *testing.T) {
	for _, args := range [][]string{
		{"record", "--unwind", "lbr", "--", "true"},
		{"record", "--unwind", "fp", "--keep-raw", "--", "true"},
		{"record", "--unwind", "dwarf", "--stack-size", "70000", "--", "true"},
	} {
		var so, se bytes.Buffer
		if code := run(args, &so, &se); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, se.String())
		}
	}
}
