package testbuild

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestBuildCachesAndRuns(t *testing.T) {
	t.Setenv("RAWSTACK_FIXTURE_CACHE", t.TempDir())
	c := Cmd{Tool: "cc", Args: []string{"-O2", "-o", "{dir}/hello", "{in0}"}, Inputs: []string{"testdata/hello.c"}, Out: "hello"}
	a := Build(t, c)
	out, err := exec.Command(a).Output()
	if err != nil || strings.TrimSpace(string(out)) != "hello from testbuild" {
		t.Fatalf("fixture printed %q, %v", out, err)
	}
	st, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	// Same key: the cached file, not a rebuild.
	if b := Build(t, c); b != a {
		t.Fatalf("second build at %s, first at %s", b, a)
	}
	if st2, _ := os.Stat(a); !st2.ModTime().Equal(st.ModTime()) {
		t.Fatal("cached fixture was rebuilt")
	}
	// Other flags: another key.
	c.Args = append([]string{"-O0"}, c.Args...)
	if b := Build(t, c); b == a {
		t.Fatal("different arguments reused the cached build")
	}
}

func TestBuildReportsFailure(t *testing.T) {
	t.Setenv("RAWSTACK_FIXTURE_CACHE", t.TempDir())
	if _, err := exec.LookPath("cc"); err != nil {
		Skip(t, "cc not installed")
	}
	_, err := build("cc", Cmd{Tool: "cc", Args: []string{"-o", "{dir}/x", "{in0}"}, Inputs: []string{"testdata/missing.c"}, Out: "x"})
	if err == nil || !strings.Contains(err.Error(), "missing.c") {
		t.Fatalf("missing input: err = %v, want one naming missing.c", err)
	}
	_, err = build("cc", Cmd{Tool: "cc", Args: []string{"-o", "{dir}/x", "-x", "c", "/dev/null"}, Out: "x"})
	if err == nil || !strings.Contains(err.Error(), "cc -o") {
		t.Fatalf("failing command: err = %v, want the command line", err)
	}
}
