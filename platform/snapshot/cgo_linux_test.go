package snapshot

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// buildCgo builds testdata/cgo with the go command into a cached binary.
func buildCgo(t *testing.T) string {
	t.Helper()
	goTool := testbuild.Need(t, "go", "builds the cgo fixture")
	testbuild.Need(t, "gcc", "builds the cgo fixture's C part")
	v, _ := exec.Command(goTool, "version").Output()
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "go",
		Args:   []string{"build", "-o", "{dir}/cgo", "{in0}/main.go"},
		Inputs: []string{filepath.Join("testdata", "cgo")},
		Out:    "cgo",
		Env:    []string{"CGO_ENABLED=1"},
		Dir:    ".",
		Key:    string(v),
	})
}

// TestProcessCgo snapshots a Go program whose locked threads block deep in
// C code built -O2 -fomit-frame-pointer, and compares those threads with
// gdb and eu-stack from the leaf up to runtime.asmcgocall, where the
// stack switches to the goroutine's and every unwinder stops making sense.
func TestProcessCgo(t *testing.T) {
	bin := buildCgo(t)
	cmd := startFixture(t, bin, "3", "7")
	pid := cmd.Process.Pid
	snap := snapshotOrSkip(t, pid, nil)
	checkReleased(t, pid)
	syms := loadSymtab(t, bin)
	name := func(pc uint64, k int) string {
		m := snap.Module(pc)
		if m == nil || !m.HaveBias || m.Path != bin {
			return ""
		}
		if k > 0 {
			pc--
		}
		return syms.name(pc - m.Bias)
	}
	gdb, eu := gdbStacks(t, pid), euStacks(t, pid)
	cthreads := 0
	for _, th := range snap.Threads {
		cut, leaf := -1, false
		for k, pc := range th.PCs {
			n := name(pc, k)
			leaf = leaf || n == "leaf_block"
			if strings.HasPrefix(n, "runtime.asmcgocall") {
				cut = k + 1
				break
			}
		}
		if !leaf {
			continue
		}
		cthreads++
		if cut < 10 {
			t.Errorf("tid %d: no runtime.asmcgocall after 9+ C frames:%s", th.Tid, hexPCs(th.PCs))
			continue
		}
		for oracle, want := range map[string][]uint64{"gdb": gdb[th.Tid], "eu-stack": eu[th.Tid]} {
			if len(want) < cut || hexPCs(want[:cut]) != hexPCs(th.PCs[:cut]) {
				t.Errorf("%s: tid %d\n got:%s\nwant:%s", oracle, th.Tid, hexPCs(th.PCs[:cut]), hexPCs(want))
			}
		}
	}
	if cthreads != 3 {
		t.Errorf("%d threads blocked in C, want 3", cthreads)
	}
}
