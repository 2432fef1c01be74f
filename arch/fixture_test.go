package arch

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// buildC compiles testdata/src with compiler cc and flags into a binary
// cached by the shared fixture builder and returns its path. It skips the
// test if cc is not installed.
func buildC(t testing.TB, cc, src string, flags ...string) string {
	t.Helper()
	out := strings.TrimSuffix(src, filepath.Ext(src))
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   cc,
		Args:   append(append([]string{}, flags...), "-o", "{dir}/"+out, "{in0}"),
		Inputs: []string{filepath.Join("testdata", src)},
		Out:    out,
	})
}

func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}

// buildGo builds the Go program in testdata/dir for the host with the
// shared fixture builder, keyed by its source and the Go version.
func buildGo(t testing.TB, dir string) string {
	t.Helper()
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "go",
		Args:   []string{"build", "-o", "{dir}/" + dir, "./" + filepath.Join("testdata", dir)},
		Inputs: []string{filepath.Join("testdata", dir)},
		Out:    dir,
		Env:    []string{"CGO_ENABLED=0", "GOFLAGS="},
		Dir:    ".",
		Key:    runtime.Version(),
	})
}
