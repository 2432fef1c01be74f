//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/procinfo"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestKernelThreadTarget: -p of a kernel thread says so, for record and
// snapshot, instead of a permission error or an empty trace.
func TestKernelThreadTarget(t *testing.T) {
	if !procinfo.KernelThread(2) {
		testbuild.Skip(t, "pid 2 is not a kernel thread here (a PID namespace?)")
	}
	out := t.TempDir() + "/k.rawstack"
	for _, args := range [][]string{{"record", "-p", "2", "--duration", "1s", "-o", out}, {"snapshot", "-p", "2"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 1 {
			t.Errorf("%v: exit %d, want 1; stderr: %s", args, code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "pid 2 (kthreadd): kernel thread, no user stack") {
			t.Errorf("%v: %q does not say pid 2 is a kernel thread", args, stderr.String())
		}
	}
}

// TestAlreadyTracedTarget: a snapshot of a process strace is tracing names
// strace's pid (TracerPid), not a missing capability.
func TestAlreadyTracedTarget(t *testing.T) {
	strace := testbuild.Need(t, "strace", "a second tracer holding the target")
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "needs root to ptrace")
	}
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	st := exec.Command(strace, "-p", fmt.Sprint(sleep.Process.Pid), "-o", os.DevNull)
	if err := st.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { st.Process.Kill(); st.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if tp, _ := procinfo.Tracer(sleep.Process.Pid); tp == st.Process.Pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("strace did not attach within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"snapshot", "-p", fmt.Sprint(sleep.Process.Pid)}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1; stderr: %s", code, stderr.String())
	}
	want := fmt.Sprintf("pid %d is already traced by pid %d (strace)", sleep.Process.Pid, st.Process.Pid)
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q, want it to say %q", stderr.String(), want)
	}
}
