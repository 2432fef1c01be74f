//go:build linux

package main

import (
	"bufio"
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// TestSnapshotThreadChains runs snapshot -p on a program built without
// frame pointers whose worker threads block at the end of known call
// chains (platform/snapshot's threads fixture: worker → chain_a/b/c,
// recursing, → leaf_block → read), and checks the printed stacks: every
// worker's holds leaf_block, the chain functions and worker, and the
// main thread's holds main.
func TestSnapshotThreadChains(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-fomit-frame-pointer", "-pthread", "-o", "{dir}/threads", "{in0}"},
		Inputs: []string{"../../platform/snapshot/testdata/threads.c"},
		Out:    "threads",
	})
	const workers = 4
	cmd := exec.Command(bin, strconv.Itoa(workers), "3")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("fixture printed %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	var so, se bytes.Buffer
	if code := run([]string{"snapshot", "-p", strconv.Itoa(pid)}, &so, &se); code != 0 {
		t.Fatalf("snapshot exited %d: %s", code, se.String())
	}
	threads := map[int]string{} // tid → its frames' lines
	tid := -1
	for _, line := range strings.Split(so.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "TID "); ok {
			tid, _ = strconv.Atoi(strings.TrimSuffix(strings.Fields(v)[0], ":"))
			continue
		}
		if tid >= 0 {
			threads[tid] += line + "\n"
		}
	}
	if len(threads) != workers+1 {
		t.Fatalf("%d threads printed, want %d:\n%s", len(threads), workers+1, so.String())
	}
	whole := 0
	for tid, frames := range threads {
		want := []string{" leaf_block", " chain_", " worker"}
		if tid == pid {
			want = []string{" main"}
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(frames, w)
		}
		if !ok {
			t.Errorf("thread %d lacks one of %q:\n%s", tid, want, frames)
			continue
		}
		whole++
	}
	t.Logf("snapshot -p: %d of %d threads show their whole chain", whole, len(threads))
}
