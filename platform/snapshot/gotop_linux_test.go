package snapshot

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// buildParked builds the goroutines package's fixture, a Go program
// without cgo (the threads of a cgo program start in C).
func buildParked(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "go",
		Args:   []string{"build", "-o", "{dir}/parked", "."},
		Inputs: []string{"goroutines/testdata/parked"},
		Out:    "parked",
		Env:    []string{"CGO_ENABLED=0", "GOFLAGS="},
		Dir:    dir + "/goroutines/testdata/parked",
		Key:    runtime.Version(),
	})
}

// TestProcessGoOutermost snapshots a Go program and checks that no stack
// ends in a pc that lies in no mapping. A Go thread's first frames have
// CFI that reads above the thread's stack: runtime.clone (sysmon and
// every other M) read the word above the new stack, runtime.mcall the
// word above the g0 frame it switched to; that word used to be reported
// as a caller (and the walk then failed with "no rule"). The walk must
// end at the last frame in code, as the outermost one.
func TestProcessGoOutermost(t *testing.T) {
	bin := buildParked(t)
	// Not startFixture: one goroutine of the fixture spins, so its
	// threads never all settle.
	cmd := exec.Command(bin, "-n", "5")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("fixture printed %q, %v; want ready", line, err)
	}
	snap := snapshotOrSkip(t, cmd.Process.Pid, nil)
	checkReleased(t, cmd.Process.Pid)
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
	sysmon := false
	for _, th := range snap.Threads {
		for k, pc := range th.PCs {
			if snap.Module(pc) == nil {
				t.Errorf("tid %d: frame #%d %#x lies in no mapping (stop %v):%s", th.Tid, k, pc, th.Stop, hexPCs(th.PCs))
			}
		}
		for k, pc := range th.PCs {
			if name(pc, k) != "runtime.sysmon" {
				continue
			}
			sysmon = true
			last := name(th.PCs[len(th.PCs)-1], len(th.PCs)-1)
			if !strings.HasPrefix(last, "runtime.clone") || th.Stop != arch.StopOutermost {
				t.Errorf("sysmon (tid %d) ends in %q (stop %v), want runtime.clone, outermost:%s", th.Tid, last, th.Stop, hexPCs(th.PCs))
			}
		}
	}
	if !sysmon {
		t.Errorf("no thread runs runtime.sysmon")
	}
}
