//go:build linux

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/internal/wine"
	"github.com/rawstack/rawstack/platform/snapshot"
)

// buildWinThreads builds the fixture whose threads park in worker → outer
// → middle → leaf_wait (clang + lld, PDB and DWARF), linked with dbghelp.
func buildWinThreads(t *testing.T) string {
	t.Helper()
	return testbuild.Build(t, testbuild.Cmd{
		Tool: "clang",
		Args: []string{"--target=x86_64-w64-mingw32", "-O2", "-g", "-gcodeview", "-gdwarf", "-fuse-ld=lld",
			"-Wl,--pdb={dir}/threads.pdb", mingwLib, "-o", "{dir}/threads.exe", "{in0}", "-ldbghelp"},
		Inputs: []string{"../../platform/windows/testdata/threads.c"},
		Out:    "threads.exe",
	})
}

// parkedChain matches a thread printed by snapshot whose stack holds the
// fixture's chain, in order, from the PDB.
var parkedChain = regexp.MustCompile(`(?m)^#\d+ +0x[0-9a-f]+ leaf_wait\n#\d+ +0x[0-9a-f]+ middle\n#\d+ +0x[0-9a-f]+ outer\n#\d+ +0x[0-9a-f]+ worker\n`)

// TestSnapshotWineMinidump reads a minidump that Wine's dbghelp
// MiniDumpWriteDump wrote of a process with 8 parked threads: every one
// must unwind (ntdll and kernelbase from the Wine prefix's images through
// --root, the fixture from its file) to the known chain, named from the
// PDB. The dump rewritten by rawstack (--write-minidump) must read back to
// the same stacks, here and in LLVM's obj2yaml.
func TestSnapshotWineMinidump(t *testing.T) {
	w := wine.Need(t)
	exe := buildWinThreads(t)
	dir := t.TempDir()
	dump := filepath.Join(dir, "wine.dmp")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := w.Command(ctx, exe, "8", "0", "-", wine.Path(dump)).CombinedOutput(); err != nil {
		t.Fatalf("wine threads.exe: %v\n%s", err, out)
	}
	root := filepath.Join(w.Prefix, "dosdevices")
	var out bytes.Buffer
	rewritten := filepath.Join(dir, "rawstack.dmp")
	if err := runSnapshot([]string{"--minidump", dump, "--root", root, "--write-minidump", rewritten}, &out, os.Stderr); err != nil {
		t.Fatal(err)
	}
	if n := len(parkedChain.FindAllIndex(out.Bytes(), -1)); n != 8 {
		t.Fatalf("%d of 8 parked threads show leaf_wait ← middle ← outer ← worker:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "RtlUserThreadStart") {
		t.Errorf("no stack reached RtlUserThreadStart:\n%s", out.String())
	}
	var again bytes.Buffer
	if err := runSnapshot([]string{"--minidump", rewritten, "--root", root}, &again, os.Stderr); err != nil {
		t.Fatal(err)
	}
	if strings.ReplaceAll(again.String(), rewritten, dump) != out.String() {
		t.Errorf("the dump rawstack rewrote reads back differently:\n%s\nwant\n%s", again.String(), out.String())
	}
	if tool, err := exec.LookPath("obj2yaml-19"); err == nil {
		y, err := exec.Command(tool, rewritten).CombinedOutput()
		if err != nil || !bytes.Contains(y, []byte("Type:            ThreadList")) {
			t.Errorf("obj2yaml %s: %v\n%.2000s", rewritten, err, y)
		}
	}
}

// TestSnapshotLiveUnderWine records (record -p) and snapshots a live
// Windows process with 100 parked threads with the Windows build of
// rawstack under Wine, and writes a minidump of it that the Linux build
// reads back to the same chains.
func TestSnapshotLiveUnderWine(t *testing.T) {
	w := wine.Need(t)
	exe := buildWinThreads(t)
	rawstack := w.GoBuild(t, ".")
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	target := w.Command(ctx, exe, "100", "60", wine.Path(pidFile))
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		target.Process.Kill()
		target.Wait()
	}()
	var pid int
	for deadline := time.Now().Add(2 * time.Minute); pid == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("threads.exe wrote no pid file")
		}
		if b, err := os.ReadFile(pidFile); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	// record -p --off-cpu: every parked thread is sampled off CPU in the
	// chain (on-CPU samples skip threads that do not run).
	trace := filepath.Join(dir, "threads.rawstack")
	out, err := w.Command(ctx, rawstack, "record", "-p", strconv.Itoa(pid), "--off-cpu", "-F", "20", "--duration", "2s", "-o", wine.Path(trace)).CombinedOutput()
	if err != nil {
		t.Fatalf("wine rawstack.exe record -p %d: %v\n%s", pid, err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
	var rep bytes.Buffer
	if err := runReport([]string{trace, "--top", "10", "--debug-dir", filepath.Dir(exe)}, &rep, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"leaf_wait", "middle", "outer", "worker"} {
		if !regexp.MustCompile(`(?m) ` + fn + `  \[`).Match(rep.Bytes()) {
			t.Errorf("report of record -p does not name %s:\n%s", fn, rep.String())
			break
		}
	}

	dump := filepath.Join(dir, "live.dmp")
	out, err = w.Command(ctx, rawstack, "snapshot", "-p", strconv.Itoa(pid), "--stats", "--write-minidump", wine.Path(dump)).CombinedOutput()
	if err != nil {
		t.Fatalf("wine rawstack.exe snapshot -p %d: %v\n%s", pid, err, out)
	}
	if n := len(parkedChain.FindAllIndex(out, -1)); n != 100 {
		t.Fatalf("%d of 100 parked threads show the chain:\n%s", n, out)
	}
	if m := regexp.MustCompile(`snapshot: .*`).Find(out); m != nil {
		t.Logf("%s", m)
	}
	d, err := snapshot.OpenMinidump(dump)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Pid != pid || len(d.Threads) != 101 {
		t.Errorf("dump of pid %d with %d threads, want pid %d with 101", d.Pid, len(d.Threads), pid)
	}
	var back bytes.Buffer
	if err := runSnapshot([]string{"--minidump", dump, "--root", filepath.Join(w.Prefix, "dosdevices")}, &back, os.Stderr); err != nil {
		t.Fatal(err)
	}
	if n := len(parkedChain.FindAllIndex(back.Bytes(), -1)); n != 100 {
		t.Errorf("read back on Linux: %d of 100 threads show the chain:\n%s", n, back.String())
	}
}
