package snapshot

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
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
// stack switches to the goroutine's and the C unwinders stop making
// sense. Above it, the snapshot crosses to the goroutine's stack (through
// asmcgocall's frame pointer) and must list the Go frames the runtime's
// own traceback prints for those goroutines (GOTRACEBACK=all, SIGQUIT).
func TestProcessCgo(t *testing.T) {
	bin := buildCgo(t)
	cmd := exec.Command(bin, "3", "7")
	cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	var tb lockedBuffer
	cmd.Stderr = &tb
	startCmd(t, cmd)
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
	// The runtime's view of the goroutines blocked in C.
	cmd.Process.Signal(syscall.SIGQUIT)
	cmd.Wait()
	goStacks := goTraceback(tb.String(), "main._Cfunc_c_worker")
	if len(goStacks) != 3 {
		t.Fatalf("the runtime's traceback shows %d goroutines in main._Cfunc_c_worker, want 3:\n%s", len(goStacks), tb.String())
	}
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
		var above []string
		for k, pc := range th.PCs[cut:] {
			above = append(above, strings.TrimSuffix(name(pc, cut+k), ".abi0"))
		}
		if got, want := strings.Join(above, " "), strings.Join(goStacks[0], " "); got != want {
			t.Errorf("tid %d: above runtime.asmcgocall\n got: %s\nwant: %s (the runtime's traceback)", th.Tid, got, want)
		}
	}
	if cthreads != 3 {
		t.Errorf("%d threads blocked in C, want 3", cthreads)
	}
}

// goTraceback returns, from a Go program's crash traceback (GOTRACEBACK),
// the function names of each goroutine whose stack holds fn, innermost
// first.
func goTraceback(out, fn string) [][]string {
	var all [][]string
	for _, g := range strings.Split(out, "\n\ngoroutine ") {
		var names []string
		for _, line := range strings.Split(g, "\n")[1:] {
			if line == "" || strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "created by") {
				continue
			}
			if i := strings.LastIndexByte(line, '('); i > 0 {
				names = append(names, line[:i])
			}
		}
		if slices.Contains(names, fn) {
			all = append(all, names)
		}
	}
	return all
}

// lockedBuffer is a bytes.Buffer a child's output may be copied into
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
