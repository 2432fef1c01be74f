package testbuild

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/platform"
)

// The helpers stop the test that calls them, so each case runs in a child
// test binary: TestGateChild, selected by RAWSTACK_TESTBUILD_GATE.
func TestGateChild(t *testing.T) {
	switch os.Getenv("RAWSTACK_TESTBUILD_GATE") {
	case "":
		t.Skip("run by TestGate as a child process")
	case "need":
		Need(t, "rawstack-no-such-tool", "the gate test asks for it")
	case "feature-notsupported":
		Feature(t, &platform.NotSupportedError{Feature: "frobnication", Reason: "the kernel lacks it"})
	case "feature-permission":
		Feature(t, &platform.PermissionError{Op: "frobnicating", Need: "CAP_FROB", Err: errors.New("operation not permitted")})
	case "feature-other":
		Feature(t, errors.New("invalid argument"))
	case "impossible":
		Impossible(t, "not-linux")
	case "impossible-unknown":
		Impossible(t, "no-such-entry")
	}
	t.Log("GATE-PASSED")
}

func TestGate(t *testing.T) {
	cases := []struct {
		name string
		ci   bool
		want string // "skip", "fail" or "pass"
		msg  string // in the output
	}{
		{"need", false, "skip", "rawstack-no-such-tool not installed"},
		{"need", true, "fail", "rawstack-no-such-tool not installed"},
		{"feature-notsupported", false, "skip", "frobnication"},
		{"feature-notsupported", true, "fail", "frobnication"},
		{"feature-permission", false, "skip", "CAP_FROB"},
		{"feature-permission", true, "fail", "CAP_FROB"},
		{"feature-other", false, "fail", "invalid argument"},
		{"impossible", true, "skip", "needs a Linux host"},
		{"impossible-unknown", false, "fail", "no entry \"no-such-entry\""},
	}
	for _, c := range cases {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGateChild$", "-test.v")
		cmd.Env = append(os.Environ(), "RAWSTACK_TESTBUILD_GATE="+c.name, "CI=")
		if c.ci {
			cmd.Env = append(cmd.Env, "CI=true")
		}
		out, err := cmd.CombinedOutput()
		got := "pass"
		switch {
		case err != nil:
			got = "fail"
		case strings.Contains(string(out), "--- SKIP"):
			got = "skip"
		}
		if got != c.want || !strings.Contains(string(out), c.msg) || (got == "pass") != strings.Contains(string(out), "GATE-PASSED") {
			t.Errorf("%s with CI=%v: %s, want %s naming %q; output:\n%s", c.name, c.ci, got, c.want, c.msg, out)
		}
	}
}

func TestCI(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "1": true, "": false, "false": false, "yes": false} {
		t.Setenv("CI", v)
		if CI() != want {
			t.Errorf("CI=%q: CI() = %v, want %v", v, !want, want)
		}
	}
}

func TestCacheRoot(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("RAWSTACK_FIXTURE_CACHE", dir)
	if got, err := CacheDir(); err != nil || !strings.HasPrefix(got, dir+string(os.PathSeparator)) {
		t.Fatalf("CacheDir() = %s, %v; want one under RAWSTACK_FIXTURE_CACHE=%s", got, err, dir)
	}
}
