package goruntime

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestGoLayout reads the g's layout from a Go program built with and
// without DWARF, and refuses a program that is not Go.
func TestGoLayout(t *testing.T) {
	src, err := filepath.Abs("../../../tracer/testdata/labelled")
	if err != nil {
		t.Fatal(err)
	}
	build := func(out string, flags ...string) string {
		return testbuild.Build(t, testbuild.Cmd{
			Tool: "go", Args: append(append([]string{"build"}, flags...), "-o", "{dir}/"+out, "."),
			Inputs: []string{src}, Out: out, Env: []string{"CGO_ENABLED=0", "GOFLAGS="}, Dir: src,
		})
	}
	l, err := goLayoutOf(build("labelled"))
	if err != nil {
		t.Fatal(err)
	}
	// g.stack is the g's first field; goid and labels follow; a label is
	// two strings (Go >= 1.24).
	if l.stackLo != 0 || l.stackHi != 8 || l.goid == 0 || l.labels <= l.goid || !l.hasLabels || l.labelSize != 32 || l.valueOff != 16 {
		t.Errorf("layout %+v", *l)
	}
	if _, err := goLayoutOf(build("labelled-w", "-ldflags=-w")); err == nil || !strings.Contains(err.Error(), "no DWARF") {
		t.Errorf("without DWARF: %v, want an error saying so", err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		testbuild.Skip(t, "no sh")
	}
	if _, err := goLayoutOf(sh); !errors.Is(err, errNotGo) {
		t.Errorf("%s: %v, want errNotGo", sh, err)
	}
	if _, err := goLayoutOf(os.DevNull); err == nil {
		t.Error("/dev/null: no error")
	}
}
