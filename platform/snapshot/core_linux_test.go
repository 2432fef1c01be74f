package snapshot

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// gcoreOf dumps pid's core with gdb's gcore into dir and returns its path.
func gcoreOf(t *testing.T, pid int, dir string) string {
	t.Helper()
	testbuild.Need(t, "gcore", "gdb's gcore writes the core file read back")
	prefix := filepath.Join(dir, "core")
	out, err := exec.Command("gcore", "-o", prefix, strconv.Itoa(pid)).CombinedOutput()
	path := prefix + "." + strconv.Itoa(pid)
	if err != nil {
		if strings.Contains(string(out), "ptrace") {
			testbuild.Skip(t, "gcore cannot attach here: %s", out)
		}
		t.Fatalf("gcore: %v\n%s", err, out)
	}
	return path
}

// gdbCoreStacks runs gdb on a core and returns each thread's real frames.
func gdbCoreStacks(t *testing.T, bin, core string) stacks {
	t.Helper()
	script, _ := filepath.Abs(filepath.Join("testdata", "gdbstacks.py"))
	out := runOracle(t, "gdb", "-batch", "-nx", bin, core, "-x", script)
	return parseGDBStacks(t, out)
}

// TestCoreMatchesGDB snapshots a gcore dump of the fixture, whose text
// segments the core omits, and compares it with gdb on the same core and
// with a live snapshot; then again with the executable gone from the path
// the core names, found through Options.Exe.
func TestCoreMatchesGDB(t *testing.T) {
	orig := testbuild.CC(t, "gcc", "", []string{"testdata/threads.c"}, fixtures[0].flags...)
	dir := t.TempDir()
	bin := filepath.Join(dir, "threads")
	b, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := startFixture(t, bin, "3", "5")
	pid := cmd.Process.Pid
	live := snapshotOrSkip(t, pid, nil)
	core := gcoreOf(t, pid, dir)
	checkReleased(t, pid)

	snap, err := Core(core, nil)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Pid != pid || len(snap.Threads) != 4 {
		t.Fatalf("core: pid %d with %d threads, want pid %d with 4", snap.Pid, len(snap.Threads), pid)
	}
	want := live.stacks()
	got := snap.stacks()
	oracle := gdbCoreStacks(t, bin, core)
	for tid, w := range want {
		if hexPCs(got[tid]) != hexPCs(w) {
			t.Errorf("tid %d: core\n got:%s\nlive:%s", tid, hexPCs(got[tid]), hexPCs(w))
		}
		if hexPCs(oracle[tid]) != hexPCs(w) {
			t.Errorf("tid %d: gdb on the core\n gdb:%s\nlive:%s", tid, hexPCs(oracle[tid]), hexPCs(w))
		}
	}
	if len(got) != len(want) || len(oracle) != len(want) {
		t.Errorf("threads: core %d, gdb %d, live %d", len(got), len(oracle), len(want))
	}

	// Without the executable the unwind stops in it; with Exe it is whole.
	cmd.Process.Kill()
	cmd.Wait()
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	snap, err = Core(core, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range snap.Threads {
		if len(th.PCs) >= len(want[th.Tid]) {
			t.Errorf("tid %d: %d frames without the executable, want fewer than %d", th.Tid, len(th.PCs), len(want[th.Tid]))
		}
	}
	snap, err = Core(core, &Options{Exe: orig})
	if err != nil {
		t.Fatal(err)
	}
	for tid, pcs := range snap.stacks() {
		if hexPCs(pcs) != hexPCs(want[tid]) {
			t.Errorf("tid %d with Exe:\n got:%s\nwant:%s", tid, hexPCs(pcs), hexPCs(want[tid]))
		}
	}
	if m := snap.Module(snap.Threads[1].PCs[1]); m == nil || m.File != orig || len(m.BuildID) == 0 {
		t.Errorf("with Exe the executable's module is %+v, want file %s with a build id", m, orig)
	}
}

// TestKernelCore has the kernel dump the fixture's core (core_pattern
// "core", RLIMIT_CORE raised in the shell that starts it) and compares its
// stacks with a live snapshot taken just before and with gdb on the core.
// A kernel core, unlike gcore's, has a PT_LOAD for every mapping and the
// first page of each ELF file.
func TestKernelCore(t *testing.T) {
	pat, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil || strings.TrimSpace(string(pat)) != "core" {
		testbuild.Skip(t, "kernel.core_pattern is %q, not the plain \"core\" this test needs", strings.TrimSpace(string(pat)))
	}
	bin := testbuild.CC(t, "gcc", "", []string{"testdata/threads.c"}, fixtures[0].flags...)
	dir := t.TempDir()
	// Raise the soft limit as far as the hard one allows; with a hard
	// limit of 0 no core appears and the test skips.
	cmd := exec.Command("sh", "-c", `ulimit -c unlimited 2>/dev/null || ulimit -c "$(ulimit -H -c)"; exec "$0" 3 5`, bin)
	cmd.Dir = dir
	cmd = startCmd(t, cmd)
	pid := cmd.Process.Pid
	live := snapshotOrSkip(t, pid, nil)
	cmd.Process.Signal(syscall.SIGABRT)
	cmd.Wait()
	core := filepath.Join(dir, "core")
	if _, err := os.Stat(core); err != nil {
		if _, err2 := os.Stat(core + "." + strconv.Itoa(pid)); err2 != nil {
			testbuild.Skip(t, "the kernel wrote no core (%v): RLIMIT_CORE may be capped", err)
		}
		core += "." + strconv.Itoa(pid)
	}
	snap, err := Core(core, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := live.stacks()
	got := snap.stacks()
	oracle := gdbCoreStacks(t, bin, core)
	for tid, w := range want {
		if !sameAfterSignal(got[tid], w) {
			t.Errorf("tid %d: kernel core\n got:%s\nlive:%s", tid, hexPCs(got[tid]), hexPCs(w))
		}
		if hexPCs(oracle[tid]) != hexPCs(got[tid]) {
			t.Errorf("tid %d: gdb on the kernel core\n gdb:%s\nrawstack:%s", tid, hexPCs(oracle[tid]), hexPCs(got[tid]))
		}
	}
	if len(got) != len(want) {
		t.Errorf("kernel core has %d threads, live %d", len(got), len(want))
	}
}

// sameAfterSignal reports whether a thread's stack in a core dumped by a
// signal is the one the live snapshot saw. A thread blocked in a
// restartable system call is the exception at the leaf: when the signal
// interrupts it, the kernel rewinds its pc by the length of the x86-64
// syscall instruction (2 bytes) so the call restarts, and the core
// records the rewound pc.
func sameAfterSignal(core, live []uint64) bool {
	if hexPCs(core) == hexPCs(live) {
		return true
	}
	return len(core) == len(live) && len(core) > 0 && core[0] == live[0]-2 &&
		hexPCs(core[1:]) == hexPCs(live[1:])
}
