package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// TestRecordPython records platform/linux/cpython/testdata/spin.py, whose
// main thread spins in alpha_py → beta_py → gamma_py, with each CPython (3.8 to 3.13)
// this machine has, each unwind mode of the perf back end and the eBPF
// back end, as a new user would: `rawstack
// record -- python spin.py`, no flag. Of the samples taken in the
// interpreter (a _PyEval_EvalFrameDefault frame), at least 85% must read
// …;_PyEval_EvalFrameDefault;…alpha_py;beta_py;gamma_py in folded output,
// and pprof must give gamma_py spin.py, lines its line table holds
// (co_lines, printed by the program) and every line the program's own
// traceback (sys._current_frames) gave it. (The traceback is no oracle
// for shares of lines: another thread sees the spinning one only where
// it drops the GIL, at the loop's backward jump.)
func TestRecordPython(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	spin, _ := filepath.Abs("../../platform/linux/cpython/testdata/spin.py")
	for _, v := range []string{"3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "debian3.11"} {
		for _, mode := range []string{"fp", "dwarf", "auto", "keep-raw", "ebpf"} {
			t.Run(v+"/"+mode, func(t *testing.T) {
				flags := []string{"--unwind", mode}
				if mode == "keep-raw" { // RawStack events, unwound at convert time
					flags = []string{"--unwind", "dwarf", "--keep-raw"}
				}
				if mode == "ebpf" {
					testbuild.Feature(t, linux.ProbeBPF())
					flags = []string{"--backend", "ebpf"} // dwarf: a stack window unwound with CFI
				}
				python := testbuild.Python(t, v)
				// pyenv's 3.8–3.10 keep no frame pointers in libpython:
				// with --unwind fp the native stack breaks inside it, and
				// only one evaluation frame is left to splice at; the
				// Python frames, read from the interpreter, still come in
				// order, the rest of them at the root end.
				chainOK := pythonChain
				if mode == "fp" && (v == "3.8" || v == "3.9" || v == "3.10") {
					chainOK = func(names, chain []string) bool {
						return inOrder(names, chain) && slices.Contains(names, "_PyEval_EvalFrameDefault")
					}
				}
				dir := t.TempDir()
				trace, oracle := filepath.Join(dir, "t.rawstack"), filepath.Join(dir, "oracle")
				var stdout, stderr bytes.Buffer
				sh := "exec " + shellQuote(python) + " " + shellQuote(spin) + " 1.5 > " + shellQuote(oracle)
				if code := run(append(append([]string{"record", "-q", "-o", trace, "-F", "999"}, flags...), "--", "/bin/sh", "-c", sh), &stdout, &stderr); code != 0 {
					t.Fatalf("record exited %d: %s", code, stderr.String())
				}
				if mode == "ebpf" {
					// The eBPF back end reads the frames in BPF at the
					// sample once the recorder has told the program of
					// the process, which it does when it reads the
					// mapping of the interpreter: the samples of that
					// first read period (up to 100 ms of the program's
					// 1.5 s and its start-up) are read from user space.
					var all, at int
					for _, l := range strings.Split(stderr.String(), "\n") {
						if _, err := fmt.Sscanf(l, "rawstack record: %d samples with Python frames, %d of them read in BPF at the sample", &all, &at); err == nil {
							break
						}
					}
					if all == 0 || at < all*75/100 {
						t.Errorf("eBPF: %d of %d samples with Python frames read in BPF at the sample: %s", at, all, stderr.String())
					}
				}
				chain := oracleChain(t, oracle)
				tableLines := tableLines(t, oracle, "gamma_py")
				src, err := os.ReadFile(spin)
				if err != nil {
					t.Fatal(err)
				}
				body := int64(strings.Count(string(src[:strings.Index(string(src), "x += n")]), "\n") + 1)

				stdout.Reset()
				if code := run([]string{"convert", trace, "--to", "folded", "--no-debuginfod"}, &stdout, &stderr); code != 0 {
					t.Fatalf("convert exited %d: %s", code, stderr.String())
				}
				var interp, inChain int64
				sc := bufio.NewScanner(&stdout)
				sc.Buffer(make([]byte, 1<<20), 1<<24)
				example := ""
				for sc.Scan() {
					line := sc.Text()
					sp := strings.LastIndexByte(line, ' ')
					n, _ := strconv.ParseInt(line[sp+1:], 10, 64)
					stack := line[:sp]
					if !strings.Contains(stack, "_PyEval_EvalFrameDefault") {
						continue
					}
					interp += n
					if chainOK(strings.Split(stack, ";"), chain) {
						inChain += n
					} else if example == "" {
						example = stack
					}
				}
				if interp == 0 {
					t.Fatalf("no sample in _PyEval_EvalFrameDefault:\n%s", stdout.String())
				}
				share := float64(inChain) / float64(interp)
				t.Logf("%s %s: %d/%d samples in the interpreter (%.1f%%) read …_PyEval_EvalFrameDefault…%s", v, mode, inChain, interp, 100*share, strings.Join(chain, ";"))
				if share < 0.85 {
					t.Errorf("only %.1f%% of the interpreter's samples show the chain; one that does not: %s", 100*share, example)
				}

				// A timeline, whose samples are spliced as the profile's.
				chrome := filepath.Join(dir, "t.json")
				if code := run([]string{"convert", trace, "--to", "chrome", "-o", chrome, "--no-debuginfod"}, &stdout, &stderr); code != 0 {
					t.Fatalf("convert exited %d: %s", code, stderr.String())
				}
				b, err := os.ReadFile(chrome)
				if err != nil {
					t.Fatal(err)
				}
				var tlInterp, tlChain int64
				for _, s := range readChrome(t, b) {
					if slices.Contains(s.names, "_PyEval_EvalFrameDefault") {
						tlInterp += s.w
						if chainOK(s.names, chain) {
							tlChain += s.w
						}
					}
				}
				if tlInterp == 0 || float64(tlChain) < 0.85*float64(tlInterp) {
					t.Errorf("chrome timeline: the chain in %d of the interpreter's %d ns", tlChain, tlInterp)
				}

				prof := filepath.Join(dir, "t.pb.gz")
				if code := run([]string{"convert", trace, "--to", "pprof", "-o", prof, "--no-debuginfod"}, &stdout, &stderr); code != 0 {
					t.Fatalf("convert exited %d: %s", code, stderr.String())
				}
				f, err := os.Open(prof)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				p, err := profile.Parse(f)
				if err != nil {
					t.Fatal(err)
				}
				perLine := map[int64]int64{}
				var gamma, held int64 // samples in gamma_py; of them, labelled python.gil=held
				for _, s := range p.Sample {
					if len(s.Location) == 0 {
						continue
					}
					for _, loc := range s.Location {
						for _, ln := range loc.Line {
							if ln.Function.Name == "gamma_py" {
								if !strings.HasSuffix(ln.Function.Filename, "spin.py") {
									t.Fatalf("gamma_py in file %q", ln.Function.Filename)
								}
								perLine[ln.Line] += s.Value[0]
								gamma += s.Value[0]
								if slices.Equal(s.Label["python.gil"], []string{"held"}) {
									held += s.Value[0]
								}
							}
						}
					}
				}
				// The spinning thread holds the GIL (no other thread asks
				// for it): its samples carry the label.
				if gamma == 0 || held < gamma*85/100 {
					t.Errorf("%d of %d samples in gamma_py are labelled python.gil=held", held, gamma)
				}
				t.Logf("gamma_py's samples by line: %v; the line table's lines: %v", perLine, tableLines)
				var top int64
				for l, n := range perLine {
					if !tableLines[l] {
						t.Errorf("pprof gives gamma_py line %d, which its line table does not hold (%v)", l, tableLines)
					}
					if n > perLine[top] {
						top = l
					}
				}
				if top != body {
					t.Errorf("pprof gives gamma_py line %d most, not the loop's body (x += n, line %d): %v", top, body, perLine)
				}
			})
		}
	}
}

// pythonChain reports whether names (root first) hold chain in order,
// its first frame after a _PyEval_EvalFrameDefault and each later one
// either right after the one before (3.11+: one evaluation frame runs
// them all) or after an evaluation frame of its own (3.8–3.10: one per
// Python call).
func pythonChain(names, chain []string) bool {
	j, sawEval, prevPy := 0, false, false
	for _, n := range names {
		if j < len(chain) && n == chain[j] && (sawEval || j > 0 && prevPy) {
			j, sawEval, prevPy = j+1, false, true
			continue
		}
		if n == "_PyEval_EvalFrameDefault" {
			sawEval = true
		}
		prevPy = false
	}
	return j == len(chain)
}

// inOrder reports whether chain is a subsequence of names.
func inOrder(names, chain []string) bool {
	j := 0
	for _, n := range names {
		if j < len(chain) && n == chain[j] {
			j++
		}
	}
	return j == len(chain)
}

// tableLines returns the lines gamma_py's line table holds, as the
// program printed them ("lines gamma_py 13 14 15 16").
func tableLines(t *testing.T, path, fn string) map[int64]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[int64]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "lines "+fn+" "); ok {
			for _, f := range strings.Fields(rest) {
				n, _ := strconv.ParseInt(f, 10, 64)
				lines[n] = true
			}
		}
	}
	if len(lines) == 0 {
		t.Fatalf("%s: the program printed no line table of %s", path, fn)
	}
	return lines
}

// oracleChain returns the main thread's functions, root first, from the
// last traceback the program printed of itself ("oracle gamma_py:16
// beta_py:21 …", leaf first).
func oracleChain(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var chain []string
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "oracle "); ok {
			chain = chain[:0]
			for _, f := range strings.Fields(rest) {
				chain = append(chain, f[:strings.LastIndexByte(f, ':')])
			}
		}
	}
	slices.Reverse(chain)
	if len(chain) < 4 || chain[len(chain)-1] != "gamma_py" {
		t.Fatalf("%s: the program's traceback %v does not end in gamma_py:\n%s", path, chain, b)
	}
	return chain
}

// TestRecordNoPython: --no-python records native stacks only.
func TestRecordNoPython(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	python := testbuild.Python(t, "3.12")
	spin, _ := filepath.Abs("../../platform/linux/cpython/testdata/spin.py")
	trace := filepath.Join(t.TempDir(), "t.rawstack")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"record", "-q", "--no-python", "-o", trace, "--", python, spin, "0.5"}, &stdout, &stderr); code != 0 {
		t.Fatalf("record exited %d: %s", code, stderr.String())
	}
	if n := countKinds(t, trace)[format.KindPyStack]; n != 0 {
		t.Errorf("--no-python wrote %d PyStack events", n)
	}
	share, all := foldedShare(t, trace, "_PyEval_EvalFrameDefault")
	if py, _ := foldedShare(t, trace, "gamma_py"); py != 0 || share == 0 {
		t.Errorf("--no-python: %.0f%% of %d samples name gamma_py, %.0f%% the interpreter", 100*py, all, 100*share)
	}
}

// TestRecordPythonUnknownVersion: a CPython whose layout rawstack does
// not know (3.7) is recorded with native stacks and one warning.
func TestRecordPythonUnknownVersion(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	python := testbuild.Python(t, "3.7")
	trace := filepath.Join(t.TempDir(), "t.rawstack")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"record", "-q", "-o", trace, "--", python, "-c", "sum(range(10**7))"}, &stdout, &stderr); code != 0 {
		t.Fatalf("record exited %d: %s", code, stderr.String())
	}
	if n := strings.Count(stderr.String(), "warning: Python frames not recorded"); n != 1 || !strings.Contains(stderr.String(), "CPython 3.7") {
		t.Errorf("record's output has %d warnings, want one naming CPython 3.7:\n%s", n, stderr.String())
	}
	if n := countKinds(t, trace)[format.KindPyStack]; n != 0 {
		t.Errorf("%d PyStack events for CPython 3.7", n)
	}
}
