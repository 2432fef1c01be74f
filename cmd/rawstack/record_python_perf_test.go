//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// perfShareTolerance is how far apart (absolute, in shares of the three
// functions' samples) rawstack's and perf's shares of alpha_py, beta_py
// and gamma_py may be: three standard deviations of the difference of two
// shares counted from n1 and n2 samples (the two sample the same process
// for the same 3 s, rawstack at 999 Hz, perf at 499 Hz), and at least
// 0.05 (three standard deviations for ~1500 samples each). Samples are
// not independent within a call: a 1–3 ms call gets about two of
// rawstack's at 999 Hz and about one of perf's, so rawstack's n1 counts
// as n1/2 (CI once had alpha_py 0.055 apart with 1457 and 729 samples,
// against 0.054 counted as independent).
func perfShareTolerance(p, n1, n2 float64) float64 {
	return max(0.05, 3*math.Sqrt(p*(1-p)*(2/n1+1/n2)))
}

// TestRecordPythonPerf: perf, with the interpreter's own -X perf
// trampolines (CPython 3.12 and 3.13, which name each Python call
// "py::FUNCTION:FILE" in /tmp/perf-PID.map), and rawstack record shares.py
// at once; the shares of alpha_py, beta_py and gamma_py (about 1/6, 2/6,
// 3/6 of the loop, each call 1–3 ms) must agree within
// perfShareTolerance. perf unwinds with DWARF (pyenv's libpython keeps no
// frame pointers, so -g stops in _PyEval_EvalFrameDefault). Both of
// rawstack's back ends are held to it: the eBPF one reads the frames in
// BPF at the sample; the perf one reads them from outside when the ring
// wakes it, once per sample for a Python target, tens of µs after it.
func TestRecordPythonPerf(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	testbuild.Feature(t, linux.ProbeBPF())
	perf := testbuild.Need(t, "perf", "perf record of python -X perf is the oracle of the function shares")
	script, _ := filepath.Abs("../../platform/linux/cpython/testdata/shares.py")
	names := []string{"alpha_py", "beta_py", "gamma_py"}
	for _, c := range []struct{ v, backend string }{{"3.12", "ebpf"}, {"3.13", "ebpf"}, {"3.12", "perf"}, {"3.13", "perf"}} {
		v := c.v
		t.Run(v+"/"+c.backend, func(t *testing.T) {
			python := testbuild.Python(t, v)
			dir := t.TempDir()
			cmd := exec.Command(python, "-X", "perf", script, "5")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			t.Cleanup(func() {
				cmd.Process.Kill()
				cmd.Wait()
				os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid))
			})
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				t.Fatalf("shares.py: %q %v", line, err)
			}
			go io.Copy(io.Discard, out)

			data := filepath.Join(dir, "perf.data")
			rec := exec.Command(perf, "record", "-q", "--call-graph", "dwarf,16384", "-F", "499", "-o", data, "-p", strconv.Itoa(pid), "--", "sleep", "3")
			var perfOut bytes.Buffer
			rec.Stdout, rec.Stderr = &perfOut, &perfOut
			if err := rec.Start(); err != nil {
				t.Fatal(err)
			}
			trace := filepath.Join(dir, "t.rawstack")
			var stdout, stderr bytes.Buffer
			code := run([]string{"record", "-q", "--backend", c.backend, "-o", trace, "-F", "999", "-p", strconv.Itoa(pid), "--duration", "3s"}, &stdout, &stderr)
			perfErr := rec.Wait()
			if code != 0 {
				t.Fatalf("record exited %d: %s", code, stderr.String())
			}
			if perfErr != nil {
				t.Fatalf("perf record: %v\n%s", perfErr, perfOut.String())
			}

			// perf: a sample counts for the function whose trampoline
			// is its innermost py:: frame.
			sb, err := exec.Command(perf, "script", "-i", data, "-F", "ip,sym").Output()
			if err != nil {
				t.Fatalf("perf script: %v", err)
			}
			theirs := map[string]float64{}
			for _, block := range strings.Split(string(sb), "\n\n") {
				for _, l := range strings.Split(block, "\n") {
					if _, rest, ok := strings.Cut(l, " py::"); ok {
						theirs[rest[:strings.IndexByte(rest, ':')]]++
						break
					}
				}
			}
			// rawstack: the innermost of its Python frames (folded
			// stacks are root first).
			var fb bytes.Buffer
			if code := run([]string{"convert", trace, "--to", "folded", "--no-debuginfod"}, &fb, &stderr); code != 0 {
				t.Fatalf("convert exited %d: %s", code, stderr.String())
			}
			ours := map[string]float64{}
			sc := bufio.NewScanner(&fb)
			sc.Buffer(make([]byte, 1<<20), 1<<24)
			for sc.Scan() {
				line := sc.Text()
				sp := strings.LastIndexByte(line, ' ')
				n, _ := strconv.ParseFloat(line[sp+1:], 64)
				frames := strings.Split(line[:sp], ";")
				for i := len(frames) - 1; i >= 0; i-- {
					if f := frames[i]; f == "alpha_py" || f == "beta_py" || f == "gamma_py" {
						ours[f] += n
						break
					}
				}
			}
			norm := func(m map[string]float64) (map[string]float64, float64) {
				var sum float64
				for _, n := range names {
					sum += m[n]
				}
				out := map[string]float64{}
				for _, n := range names {
					out[n] = m[n] / sum
				}
				return out, sum
			}
			o, on := norm(ours)
			p, pn := norm(theirs)
			t.Logf("CPython %s, %s back end, shares of %v: rawstack %.3f %.3f %.3f (%.0f samples), perf -X perf %.3f %.3f %.3f (%.0f samples)",
				v, c.backend, names, o[names[0]], o[names[1]], o[names[2]], on, p[names[0]], p[names[1]], p[names[2]], pn)
			if on < 200 || pn < 200 {
				t.Fatalf("too few samples in the three functions: rawstack %.0f, perf %.0f\n%s", on, pn, stderr.String())
			}
			for _, n := range names {
				tol := perfShareTolerance(p[n], on, pn)
				if d := math.Abs(o[n] - p[n]); d > tol || math.IsNaN(d) {
					t.Errorf("%s: rawstack's share %.3f, perf's %.3f: %.3f apart, more than %.3f", n, o[n], p[n], d, tol)
				}
			}
		})
	}
}
