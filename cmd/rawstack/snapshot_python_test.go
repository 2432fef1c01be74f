package main

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
			cmd := exec.Command(python, spin)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			var main, sleeper []string
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
				t.Fatalf("spin.py printed no traceback of itself")
			}
			time.Sleep(50 * time.Millisecond)
			var stdout, stderr bytes.Buffer
			if code := run([]string{"snapshot", "-p", strconv.Itoa(cmd.Process.Pid)}, &stdout, &stderr); code != 0 {
				t.Fatalf("snapshot exited %d: %s", code, stderr.String())
			}
			// Per thread: its Python frames (name and name:line) and
			// whether they came right before _PyEval_EvalFrameDefault.
			type thread struct {
				names, lines []string
				atEval       bool
			}
			threads := map[int]*thread{}
			var cur *thread
			prevPy := false
			for _, l := range strings.Split(stdout.String(), "\n") {
				if rest, ok := strings.CutPrefix(l, "TID "); ok {
					tid, _ := strconv.Atoi(strings.TrimSuffix(rest, ":"))
					cur = &thread{}
					threads[tid] = cur
					continue
				}
				if cur == nil {
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
