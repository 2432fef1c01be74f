package tracer

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// buildC compiles testdata sources with cc and the given flags into a
// binary cached by the shared fixture builder, and returns its path. The
// test skips when no C compiler is installed.
func buildC(t testing.TB, out string, srcs []string, flags ...string) string {
	t.Helper()
	args := []string{"-o", "{dir}/" + out}
	var inputs []string
	for i, s := range srcs {
		inputs = append(inputs, filepath.Join("testdata", s))
		args = append(args, fmt.Sprintf("{in%d}", i))
	}
	return testbuild.Build(t, testbuild.Cmd{Tool: "cc", Args: append(args, flags...), Inputs: inputs, Out: out})
}

// buildRust compiles testdata/src with rustc -O and frame pointers, cached
// like buildC. The test skips when rustc is not installed. Shrink-wrapping
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
