package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestSnapshotGoroutinesGroup runs `rawstack snapshot -p PID --goroutines
// --group` (rawstack running this command) on the parked fixture and
// checks the group of its 50 workers, then the one-by-one listing.
func TestSnapshotGoroutinesGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "needs root for ptrace of a child under yama (ptrace_scope)")
	}
	goTool := testbuild.Need(t, "go", "builds rawstack and the fixture")
	dir := t.TempDir()
	build := exec.Command(goTool, "build", "-o", dir+"/", "../rawstack", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	src, _ := filepath.Abs("../../platform/snapshot/goroutines/testdata/parked")
	parked := testbuild.Build(t, testbuild.Cmd{
		Tool: "go", Args: []string{"build", "-o", "{dir}/parked", "."},
		Inputs: []string{src}, Out: "parked", Env: []string{"CGO_ENABLED=0", "GOFLAGS="}, Dir: src,
	})
	cmd := exec.Command(parked, "-n", "50")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("fixture exited")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("fixture not ready")
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	var out, errb bytes.Buffer
	rs := exec.Command(filepath.Join(dir, "rawstack"), "snapshot", "-p", pid, "--goroutines", "--group")
	rs.Stdout, rs.Stderr = &out, &errb
	if err := rs.Run(); err != nil {
		t.Fatalf("rawstack snapshot --goroutines --group: %v\n%s", err, errb.String())
	}
	want := "\n50 goroutines: chan receive ← main.stage3 ← main.stage2 ← main.stage1 ← main.worker ← …\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("no %q in\n%s", want, out.String())
	}
	if !regexp.MustCompile(`\n1 goroutine: running \(thread \d+\) ← main.spin`).MatchString(out.String()) {
		t.Errorf("no running spinner with its thread in\n%s", out.String())
	}
	out.Reset()
	rs = exec.Command(filepath.Join(dir, "rawstack"), "snapshot", "-p", pid, "--goroutines")
	rs.Stdout, rs.Stderr = &out, &errb
	if err := rs.Run(); err != nil {
		t.Fatalf("rawstack snapshot --goroutines: %v\n%s", err, errb.String())
	}
	blocks := regexp.MustCompile(`(?s)goroutine \d+ \[chan receive(, \d+s)?\]:\n.*?main\.stage2\(\.\.\.\) \(inlined\)\n.*?created by main\.main\n`).FindAllString(out.String(), -1)
	if len(blocks) != 50 {
		t.Errorf("%d workers listed with their chain and creator, want 50\n%s", len(blocks), out.String())
	}
	// A stripped binary: a clear message, exit status 1.
	rs = exec.Command(filepath.Join(dir, "rawstack"), "snapshot", "--core", "/dev/null", "--exe", "/bin/sh", "--goroutines")
	msg, err := rs.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(msg), "not a Go program") {
		t.Errorf("non-Go executable: %v: %s", err, msg)
	}
}

func TestCommas(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 4812: "4,812", 1234567: "1,234,567"} {
		if got := commas(n); got != want {
			t.Errorf("commas(%d) = %q, want %q", n, got, want)
		}
	}
}
