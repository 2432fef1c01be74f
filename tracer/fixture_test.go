package tracer

import (
	"path/filepath"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// buildRust compiles testdata/src with rustc -O and frame pointers, cached
// like testbuild.CC. The test skips when rustc is not installed. Shrink-wrapping
// is off: LLVM would otherwise set up a function's frame only around its
// calls, so a sample in a loop before them loses the caller.
func buildRust(t testing.TB, out, src string) string {
	t.Helper()
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "rustc",
		Args:   []string{"-O", "-C", "force-frame-pointers=yes", "-C", "llvm-args=-enable-shrink-wrap=false", "-o", "{dir}/" + out, "{in0}"},
		Inputs: []string{filepath.Join("testdata", src)},
		Out:    out,
	})
}
