package snapshot

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
)

// startNoWait starts bin without waiting for its threads to settle.
func startNoWait(t *testing.T, bin string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	b := make([]byte, 6)
	if _, err := out.Read(b); err != nil || string(b) != "ready\n" {
		t.Fatalf("fixture: %q %v", b, err)
	}
	return cmd
}

// TestProcessChurn snapshots a process whose threads come and go while it
// is being stopped: every snapshot succeeds and no thread is left stopped
// or traced.
func TestProcessChurn(t *testing.T) {
	bin := testbuild.CC(t, "gcc", "", []string{"testdata/churn.c"}, "-O2", "-pthread")
	cmd := startNoWait(t, bin)
	pid := cmd.Process.Pid
	threads := 0
	for i := 0; i < 30; i++ {
		if i == 15 {
			manyTracers(t) // the second half with a tracer thread per CPU
		}
		snap := snapshotOrSkip(t, pid, nil)
		threads += len(snap.Threads)
		for tid, st := range threadStates(t, pid) {
			if strings.Contains(st, "tracer=") && !strings.HasSuffix(st, "tracer=0") || st[0] == 't' || st[0] == 'T' {
				t.Fatalf("snapshot %d: tid %d left %q", i, tid, st)
			}
		}
	}
	if threads < 30 {
		t.Errorf("30 snapshots saw %d threads in all", threads)
	}
	// The process goes on creating threads.
	before := threadStates(t, pid)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		fresh := false
		for tid := range threadStates(t, pid) {
			if _, ok := before[tid]; !ok {
				fresh = true
			}
		}
		if fresh {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new threads in 10s after the snapshots")
		}
	}
}

// manyTracers makes the stopper use a tracer thread per CPU (up to its
// cap) however few threads there are and however busy the CPUs, until t
// ends.
func manyTracers(t *testing.T) {
	old, oldIgnore := minPerTracer, ignoreContention
	minPerTracer, ignoreContention = 1, true
	t.Cleanup(func() { minPerTracer, ignoreContention = old, oldIgnore })
}

// maxTid returns the highest tid of pid other than not.
func maxTid(t *testing.T, pid, not int) int {
	m := 0
	for tid := range threadStates(t, pid) {
		if tid != not {
			m = max(m, tid)
		}
	}
	return m
}

// TestProcessReleasesOnError makes the seize of one thread fail (another
// tracer holds it) and checks that the snapshot fails with a
// PermissionError and leaves every other thread running and untraced.
func TestProcessReleasesOnError(t *testing.T) {
	bin := testbuild.CC(t, "gcc", "", []string{"testdata/threads.c"}, fixtures[0].flags...)
	seize := testbuild.CC(t, "gcc", "", []string{"testdata/seize.c"}, "-O2")
	cmd := startFixture(t, bin, "6", "4")
	pid := cmd.Process.Pid
	snapshotOrSkip(t, pid, nil) // skips where ptrace is not permitted
	// Hold a worker; with luck others are seized before the failure.
	last := maxTid(t, pid, pid)
	holder := exec.Command(seize, strconv.Itoa(last))
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		holder.Process.Kill()
		holder.Wait()
	}()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "attached\n" {
		t.Fatalf("seize helper: %q %v", line, err)
	}
	_, err = Process(pid, nil)
	var te *platform.TracedError
	if !errors.As(err, &te) || te.Tracer != holder.Process.Pid {
		t.Fatalf("snapshot of a process with a traced thread: %v, want a TracedError naming tracer %d", err, holder.Process.Pid)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(last)) {
		t.Errorf("error %q does not name tid %d", err, last)
	}
	for tid, s := range threadStates(t, pid) {
		if tid != last && s != "S tracer=0" && s != "R tracer=0" {
			t.Errorf("after the failed snapshot tid %d is %q, want running or sleeping and untraced", tid, s)
		}
	}
}

// TestProcessStopped snapshots a process stopped by SIGSTOP: the stacks
// are those of the running process, and the process stays stopped until
// SIGCONT.
func TestProcessStopped(t *testing.T) {
	bin := testbuild.CC(t, "gcc", "", []string{"testdata/threads.c"}, fixtures[0].flags...)
	cmd := startFixture(t, bin, "3", "4")
	pid := cmd.Process.Pid
	running := snapshotOrSkip(t, pid, nil).stacks()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Signal(syscall.SIGCONT)
	waitState(t, pid, "T tracer=0")
	stopped := snapshotOrSkip(t, pid, nil).stacks()
	for tid, pcs := range running {
		// SIGSTOP interrupts a thread's restartable system call and
		// rewinds its pc to the syscall instruction (sameAfterSignal).
		if !sameAfterSignal(stopped[tid], pcs) {
			t.Errorf("tid %d stopped:%s\nrunning:%s", tid, hexPCs(stopped[tid]), hexPCs(pcs))
		}
	}
	// Detached threads run for a moment to re-enter the group stop.
	waitState(t, pid, "T tracer=0")
	time.Sleep(50 * time.Millisecond)
	for tid, s := range threadStates(t, pid) {
		if s != "T tracer=0" {
			t.Errorf("after the snapshot of the stopped process tid %d is %q, want T tracer=0", tid, s)
		}
	}
	cmd.Process.Signal(syscall.SIGCONT)
	waitState(t, pid, "S tracer=0")
}

// waitState waits until every thread of pid is in state (as threadStates
// reports it).
func waitState(t *testing.T, pid int, state string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		all := true
		for _, s := range threadStates(t, pid) {
			all = all && s == state
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads of %d not all %q: %v", pid, state, threadStates(t, pid))
		}
	}
}

// TestProcessKeepsSignals sends a process queued real-time signals while
// snapshotting it over and over: a signal that stops a seized thread
// before the interrupt does must be delivered at detach, so the process
// counts every one.
func TestProcessKeepsSignals(t *testing.T) {
	bin := testbuild.CC(t, "gcc", "", []string{"testdata/sigcount.c"}, "-O2")
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("fixture: %q %v", line, err)
	}
	pid := cmd.Process.Pid
	snapshotOrSkip(t, pid, nil)
	const signals = 300
	rt := syscall.Signal(34) // SIGRTMIN as the kernel numbers it; glibc reserves 32 and 33
	done := make(chan int)
	go func() {
		n := 0
		for ; ; n++ {
			select {
			case <-done:
				done <- n
				return
			default:
			}
			if _, err := Process(pid, nil); err != nil {
				t.Error(err)
				done <- n
				<-done
				return
			}
		}
	}()
	for i := 0; i < signals; i++ {
		if err := cmd.Process.Signal(rt); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	done <- 0
	snaps := <-done
	time.Sleep(50 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if got := strings.TrimSpace(line); got != strconv.Itoa(signals) {
		t.Errorf("the process counted %s signals, want %d (%d snapshots meanwhile)", got, signals, snaps)
	}
	t.Logf("%d snapshots while sending %d signals", snaps, signals)
}

// TestProcessProcMem reads stacks through /proc/PID/mem, the fallback for
// kernels or sandboxes without process_vm_readv, and expects the stacks
// process_vm_readv gives.
func TestProcessProcMem(t *testing.T) {
	bin := testbuild.CC(t, "gcc", "", []string{"testdata/threads.c"}, fixtures[0].flags...)
	cmd := startFixture(t, bin, "4", "6")
	pid := cmd.Process.Pid
	want := snapshotOrSkip(t, pid, nil).stacks()
	forceProcMem = true
	defer func() { forceProcMem = false }()
	got := snapshotOrSkip(t, pid, nil).stacks()
	checkReleased(t, pid)
	if len(got) != len(want) {
		t.Fatalf("%d threads, want %d", len(got), len(want))
	}
	for tid, w := range want {
		if hexPCs(got[tid]) != hexPCs(w) || tid != pid && len(w) < 10 {
			t.Errorf("tid %d through /proc/PID/mem:%s\nprocess_vm_readv:%s", tid, hexPCs(got[tid]), hexPCs(w))
		}
	}
}
