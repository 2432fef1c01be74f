//go:build linux

package tracking

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
)

// TestAutoGo holds --unwind auto's choice for Go programs: one without
// cgo keeps frame pointers everywhere (its .debug_frame, all from the
// stack pointer, says nothing of them) and is sampled by the kernel's
// frame-pointer walk; one with cgo has C code whose CFI says it keeps
// none, and is sampled with stack copies.
func TestAutoGo(t *testing.T) {
	testbuild.Need(t, "go", "builds the Go fixtures")
	testbuild.Need(t, "gcc", "builds the cgo fixture's C part")
	src, _ := filepath.Abs("../../../arch/testdata")
	build := func(dir, cgo string) string {
		return testbuild.Build(t, testbuild.Cmd{
			Tool: "go", Args: []string{"build", "-o", "{dir}/" + dir + cgo, "./" + dir},
			Inputs: []string{filepath.Join(src, dir)}, Out: dir + cgo,
			Env: []string{"CGO_ENABLED=" + cgo, "GOFLAGS="}, Dir: src, Key: runtime.Version(),
		})
	}
	uw := newUnwinder(platform.Config{Unwind: platform.UnwindAuto})
	for _, c := range []struct {
		bin string
		fp  bool
	}{{build("goprog", "0"), true}, {build("gocgo", "1"), false}} {
		uf, fp := uw.exeKeepsFP(c.bin, c.bin)
		if uf == nil || uf.table == nil || !uf.table.Go() {
			t.Fatalf("%s: no table with a Go part", c.bin)
		}
		if fp != c.fp {
			t.Errorf("%s: keeps frame pointers %v, want %v", c.bin, fp, c.fp)
		}
	}
}
