package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestSnapshotPython: rawstack snapshot -p of spin.py prints, within each
// thread's native stack, its Python frames, as the program itself sees
// them (sys._current_frames): the main thread's chain by name (it moves
// between lines) at its evaluation frame, the sleeping thread's
// delta_py → epsilon_py → threading's frames by name and line.
func TestSnapshotPython(t *testing.T) {
	spin, _ := filepath.Abs("../../platform/linux/cpython/testdata/spin.py")
	for _, v := range []string{"3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "debian3.11"} {
		t.Run(v, func(t *testing.T) {
			python := testbuild.Python(t, v)
			cmd, main, sleeper := startSpin(t, python, spin)
			time.Sleep(50 * time.Millisecond)
			var stdout, stderr bytes.Buffer
			if code := run([]string{"snapshot", "-p", strconv.Itoa(cmd.Process.Pid)}, &stdout, &stderr); code != 0 {
				t.Fatalf("snapshot exited %d: %s", code, stderr.String())
			}
			threads := parsePySnapshot(stdout.String())
			m := threads[cmd.Process.Pid]
			if m == nil || !slices.Equal(m.names, main) || !m.atEval {
				t.Errorf("main thread: Python frames %v (before _PyEval_EvalFrameDefault: %v), the program's traceback %v\n%s", m, m != nil && m.atEval, main, stdout.String())
			}
			found := false
			for _, th := range threads {
				if slices.Equal(th.lines, sleeper) && th.atEval {
					found = true
				}
			}
			if !found {
				t.Errorf("no thread with the sleeper's frames %v\n%s", sleeper, stdout.String())
			}
		})
	}
}

// pyThread is what rawstack snapshot printed of one thread: its Python
// frames (name and name:line), leaf first, whether they came right
// before _PyEval_EvalFrameDefault, and its GIL line ("held", "waiting"
// or "").
type pyThread struct {
	names, lines []string
	atEval       bool
	gil          string
}

// parsePySnapshot reads rawstack snapshot's output, by TID.
func parsePySnapshot(out string) map[int]*pyThread {
	threads := map[int]*pyThread{}
	var cur *pyThread
	prevPy := false
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "TID "); ok {
			tid, _ := strconv.Atoi(strings.TrimSuffix(rest, ":"))
			cur = &pyThread{}
			threads[tid] = cur
			continue
		}
		if cur == nil {
			continue
		}
		switch l {
		case "    (holds the GIL)":
			cur.gil = "held"
			continue
		case "    (waiting for the GIL)":
			cur.gil = "waiting"
			continue
		}
		if py, ok := strings.CutPrefix(l, "    "); ok && strings.HasSuffix(py, ")") && !strings.HasPrefix(py, "(") {
			name, where, _ := strings.Cut(py, " (")
			cur.names = append(cur.names, name)
			cur.lines = append(cur.lines, name+":"+where[strings.LastIndexByte(where, ':')+1:len(where)-1])
			prevPy = true
			continue
		}
		if prevPy && strings.HasSuffix(l, " _PyEval_EvalFrameDefault") {
			cur.atEval = true
		}
		prevPy = false
	}
	return threads
}

// startGILWait runs gilwait.py with python and returns it with its main
// and waiter threads' tids, once the waiter has had time to wake and
// block on the GIL the main thread never releases.
func startGILWait(t *testing.T, python string) (cmd *exec.Cmd, mainTid, waiterTid int) {
	t.Helper()
	script, _ := filepath.Abs("../../platform/linux/cpython/testdata/gilwait.py")
	cmd = exec.Command(python, script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "main" {
			mainTid, _ = strconv.Atoi(f[1])
		}
		if len(f) == 2 && f[0] == "waiter" {
			waiterTid, _ = strconv.Atoi(f[1])
		}
	}
	go io.Copy(io.Discard, out)
	if mainTid == 0 || waiterTid == 0 {
		t.Fatalf("gilwait.py printed no thread ids")
	}
	time.Sleep(500 * time.Millisecond) // the waiter sleeps 0.2 s, then waits
	return cmd, mainTid, waiterTid
}

// TestSnapshotPythonGIL: in a snapshot of gilwait.py the spinning main
// thread holds the GIL (the runtime's GIL is locked, its last holder the
// main thread's state) and the thread that woke from its sleep waits for
// it (its stack is in take_gil); no other thread does either.
func TestSnapshotPythonGIL(t *testing.T) {
	for _, v := range []string{"3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "debian3.11"} {
		t.Run(v, func(t *testing.T) {
			python := testbuild.Python(t, v)
			if v == "debian3.11" {
				if _, err := os.Stat("/usr/lib/debug/.build-id"); err != nil || !hasDebugFile(python) {
					testbuild.Skip(t, "Debian's python3.11 is stripped: take_gil is named by its debug file (apt-get install python3.11-dbg)")
				}
			}
			cmd, mainTid, waiterTid := startGILWait(t, python)
			var stdout, stderr bytes.Buffer
			if code := run([]string{"snapshot", "-p", strconv.Itoa(cmd.Process.Pid)}, &stdout, &stderr); code != 0 {
				t.Fatalf("snapshot exited %d: %s", code, stderr.String())
			}
			threads := parsePySnapshot(stdout.String())
			m, w := threads[mainTid], threads[waiterTid]
			if m == nil || m.gil != "held" || len(m.names) == 0 || m.names[0] != "spin_py" {
				t.Errorf("main thread %d: %+v, want spin_py holding the GIL", mainTid, m)
			}
			if w == nil || w.gil != "waiting" || len(w.names) == 0 || w.names[0] != "waiter_py" {
				t.Errorf("waiter thread %d: %+v, want waiter_py waiting for the GIL", waiterTid, w)
			}
			for tid, th := range threads {
				if tid != mainTid && tid != waiterTid && th.gil != "" {
					t.Errorf("thread %d: GIL %s", tid, th.gil)
				}
			}
			if t.Failed() {
				t.Log(stdout.String())
			}
		})
	}
}

// hasDebugFile reports whether the build-id debug file of an ELF file is
// installed under /usr/lib/debug.
func hasDebugFile(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sec := f.Section(".note.gnu.build-id")
	if sec == nil {
		return false
	}
	b, err := sec.Data()
	if err != nil || len(b) < 16+2 {
		return false
	}
	id := hex.EncodeToString(b[16:])
	_, err = os.Stat("/usr/lib/debug/.build-id/" + id[:2] + "/" + id[2:] + ".debug")
	return err == nil
}

// TestSnapshotPythonGDB holds rawstack snapshot's Python frames and GIL
// waits to gdb's: Debian's python3.11 with python3.11-dbg's gdb
// extension (py-bt), on the same process, stopped (SIGSTOP) for both.
// For every thread, the frames (function and line, leaf first) must be
// py-bt's, and the threads py-bt says are "Waiting for the GIL" the ones
// rawstack marks (waiting for the GIL); spin.py gives a spinning and a
// sleeping thread, gilwait.py one starved of the GIL.
func TestSnapshotPythonGDB(t *testing.T) {
	gdb := testbuild.Need(t, "gdb", "gdb's py-bt is the oracle")
	python := testbuild.Python(t, "debian3.11")
	if _, err := os.Stat("/usr/share/gdb/auto-load/usr/bin/python3.11-gdb.py"); err != nil || !hasDebugFile(python) {
		testbuild.Skip(t, "gdb's py-bt for Debian's python3.11 needs python3.11-dbg (apt-get install python3.11-dbg)")
	}
	for _, fixture := range []string{"spin.py", "gilwait.py"} {
		t.Run(fixture, func(t *testing.T) {
			var cmd *exec.Cmd
			if fixture == "spin.py" {
				script, _ := filepath.Abs("../../platform/linux/cpython/testdata/spin.py")
				cmd, _, _ = startSpin(t, python, script)
			} else {
				cmd, _, _ = startGILWait(t, python)
			}
			pid := cmd.Process.Pid
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT) })
			for i := 0; i < 200 && !strings.Contains(readFile(fmt.Sprintf("/proc/%d/stat", pid)), ") T "); i++ {
				time.Sleep(5 * time.Millisecond)
			}
			var stdout, stderr bytes.Buffer
			if code := run([]string{"snapshot", "-p", strconv.Itoa(pid)}, &stdout, &stderr); code != 0 {
				t.Fatalf("snapshot exited %d: %s", code, stderr.String())
			}
			ours := parsePySnapshot(stdout.String())
			out, err := exec.Command(gdb, "-p", strconv.Itoa(pid), "-batch", "-ex", "thread apply all py-bt").CombinedOutput()
			if err != nil {
				t.Fatalf("gdb: %v\n%s", err, out)
			}
			theirs := parsePyBt(string(out))
			if len(theirs) == 0 {
				t.Fatalf("gdb printed no thread:\n%s", out)
			}
			frames := 0
			for tid, g := range theirs {
				r := ours[tid]
				if r == nil {
					t.Errorf("thread %d: in py-bt, not in the snapshot", tid)
					continue
				}
				var got []string
				for _, l := range r.lines { // Thread.run:975 → run:975: py-bt names co_name
					got = append(got, l[strings.LastIndexByte(l[:strings.LastIndexByte(l, ':')], '.')+1:])
				}
				if !slices.Equal(got, g.lines) {
					t.Errorf("thread %d: rawstack %v, py-bt %v", tid, got, g.lines)
				}
				if (r.gil == "waiting") != (g.gil == "waiting") {
					t.Errorf("thread %d: rawstack's GIL %q, py-bt's %q", tid, r.gil, g.gil)
				}
				frames += len(g.lines)
			}
			if len(ours) != len(theirs) {
				t.Errorf("%d threads in the snapshot, %d in py-bt", len(ours), len(theirs))
			}
			t.Logf("%d threads, %d Python frames agree with py-bt", len(theirs), frames)
			if t.Failed() {
				t.Logf("rawstack:\n%s\ngdb:\n%s", stdout.String(), out)
			}
		})
	}
}

// parsePyBt reads `thread apply all py-bt`'s output, by LWP: each
// thread's Python frames as "name:line", leaf first, and "waiting" when
// it printed "Waiting for the GIL".
func parsePyBt(out string) map[int]*pyThread {
	threads := map[int]*pyThread{}
	var cur *pyThread
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "Thread ") {
			if _, rest, ok := strings.Cut(l, "(LWP "); ok {
				tid, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ')')])
				cur = &pyThread{}
				threads[tid] = cur
			}
			continue
		}
		if cur == nil {
			continue
		}
		l = strings.TrimSpace(l)
		if l == "Waiting for the GIL" {
			cur.gil = "waiting"
		}
		// File "/path/spin.py", line 18, in gamma_py
		if rest, ok := strings.CutPrefix(l, "File \""); ok {
			_, rest, _ = strings.Cut(rest, "\", line ")
			line, name, ok := strings.Cut(rest, ", in ")
			if ok {
				cur.lines = append(cur.lines, name+":"+line)
			}
		}
	}
	return threads
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// startSpin runs spin.py with python until it prints "ready" and returns
// it with the tracebacks it printed of itself: the main thread's chain
// (function names) and the sleeping thread's frames (name:line).
func startSpin(t *testing.T, python, spin string) (cmd *exec.Cmd, main, sleeper []string) {
	t.Helper()
	cmd = exec.Command(python, spin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) > 1 && f[0] == "oracle":
			main = main[:0]
			for _, fr := range f[1:] {
				main = append(main, fr[:strings.LastIndexByte(fr, ':')])
			}
		case len(f) > 1 && f[0] == "sleeper":
			sleeper = f[1:]
		}
	}
	go io.Copy(io.Discard, out)
	if len(main) == 0 || len(sleeper) == 0 {
		t.Fatalf("%s printed no traceback of itself", spin)
	}
	return cmd, main, sleeper
}

// TestSnapshotPythonCore: rawstack snapshot --core of a core of spin.py
// (written by gdb's gcore while the program ran) prints the Python frames
// the live process had: the main thread's chain, holding the GIL, and
// the sleeping thread's frames by name and line, as the program saw them.
func TestSnapshotPythonCore(t *testing.T) {
	gcore := testbuild.Need(t, "gcore", "gdb's gcore writes the core of a running Python process")
	spin, _ := filepath.Abs("../../platform/linux/cpython/testdata/spin.py")
	for _, v := range []string{"3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "debian3.11"} {
		t.Run(v, func(t *testing.T) {
			python := testbuild.Python(t, v)
			cmd, main, sleeper := startSpin(t, python, spin)
			// The thread that printed "ready" hands the GIL back to the
			// spinning main thread as it ends.
			time.Sleep(100 * time.Millisecond)
			prefix := filepath.Join(t.TempDir(), "core")
			pid := cmd.Process.Pid
			if b, err := exec.Command(gcore, "-o", prefix, strconv.Itoa(pid)).CombinedOutput(); err != nil {
				t.Fatalf("gcore: %v\n%s", err, b)
			}
			core := prefix + "." + strconv.Itoa(pid)
			cmd.Process.Kill() // the core alone now
			var stdout, stderr bytes.Buffer
			if code := run([]string{"snapshot", "--core", core}, &stdout, &stderr); code != 0 {
				t.Fatalf("snapshot exited %d: %s", code, stderr.String())
			}
			threads := parsePySnapshot(stdout.String())
			m := threads[pid]
			if m == nil || !slices.Equal(m.names, main) || !m.atEval || m.gil != "held" {
				t.Errorf("main thread: %+v, want the program's traceback %v at _PyEval_EvalFrameDefault, holding the GIL", m, main)
			}
			found := false
			for _, th := range threads {
				found = found || slices.Equal(th.lines, sleeper) && th.atEval
			}
			if !found {
				t.Errorf("no thread with the sleeper's frames %v", sleeper)
			}
			if t.Failed() {
				t.Log(stdout.String())
			}
		})
	}
}
