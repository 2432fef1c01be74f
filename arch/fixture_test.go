package arch

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

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
