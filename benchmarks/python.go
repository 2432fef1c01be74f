package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The python scenario (issue 24) measures two things of rawstack's
// Python frames against their peers on the same process:
//
//   - the cost of a snapshot of a 50-thread CPython process (Debian's
//     python3.11, each thread three Python calls deep in a sleep), end to
//     end as a user runs it: `rawstack snapshot -p PID` against gdb's
//     `thread apply all py-bt` (python3.11-dbg's extension), in
//     alternating pairs, the median of the per-pair ratios;
//   - the function shares of a recording: perf with the interpreter's own
//     -X perf trampolines (3.12, DWARF stacks) and rawstack, with its perf
//     back end and with its eBPF back end, record shares.py at once; the
//     shares of alpha_py, beta_py and gamma_py are printed side by side,
//     with the program's own timing of them, and the largest difference;
//   - the cost of reading the frames in BPF: the CPU time a CPU-bound
//     CPython 3.12 program reports for itself (time.process_time) when
//     recorded at 999 Hz by the eBPF back end, with Python frames and with
//     --no-python, in alternating pairs, the median of the ratios.
func init() {
	register(&scenario{name: "python", order: 240, run: runPython})
}

const pythonThreads = 50

func testdataPath(rel string) string {
	if _, err := os.Stat(rel); err == nil {
		return rel
	}
	return filepath.Join("..", rel) // run from inside benchmarks/
}

func runPython(cfg *config) ([]row, error) {
	cli, err := buildCompanions(cfg, "rawstack-ebpf")
	if err != nil {
		return nil, err
	}
	rows, err := pythonSnapshot(cfg, cli)
	if err != nil {
		return nil, err
	}
	more, err := pythonShares(cfg, cli)
	if err != nil {
		return nil, err
	}
	rows = append(rows, more...)
	for _, backend := range []string{"perf", "ebpf"} {
		more, err = pythonCost(cfg, cli, backend)
		if err != nil {
			return nil, err
		}
		rows = append(rows, more...)
	}
	return rows, nil
}

// pythonCPU is a fixed amount of Python work that prints the CPU time it
// took.
const pythonCPU = `import time
def f(n):
    x = 0
    for i in range(n):
        x += i
    return x
for _ in range(80):
    f(200000)
print(time.process_time())
`

// pythonCost times a CPU-bound CPython 3.12 program recorded by backend
// at 999 Hz with Python frames and with --no-python, in alternating pairs.
// The perf back end reads the frames from outside at each sample's wakeup
// (a Python target's rings wake the recorder at every sample); the eBPF
// back end reads them in BPF at the sample.
func pythonCost(cfg *config, cli, backend string) ([]row, error) {
	metric := "CPU s of a CPU-bound CPython 3.12 program, " + backend + " back end at 999 Hz"
	python := pyenvPython("3.12")
	if python == "" {
		return absent("python", metric, "pyenv's CPython 3.12 not installed")
	}
	run := func(noPython bool) (float64, error) {
		args := []string{"record", "-q", "--backend", backend, "-F", "999", "-o", filepath.Join(cfg.work, "python-cost.rawstack")}
		if noPython {
			args = append(args, "--no-python")
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(cli, append(args, "--", python, "-c", pythonCPU)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("rawstack record --backend %s: %v: %s", backend, err, stderr.String())
		}
		f := strings.Fields(stdout.String())
		if len(f) == 0 {
			return 0, fmt.Errorf("the program printed no CPU time")
		}
		return strconv.ParseFloat(f[len(f)-1], 64)
	}
	pairs := 11
	if cfg.short {
		pairs = 3
	}
	with, without, ratios, err := pairRatios(pairs, func() (float64, error) { return run(false) }, func() (float64, error) { return run(true) })
	if err != nil {
		if err := needPeer(err.Error()); err != nil {
			return nil, err
		}
		return []row{{Scenario: "python", Metric: metric, Note: err.Error()}}, nil
	}
	fmt.Fprintf(cfg.logger, "  %s back end: CPU s with Python frames %.3f, --no-python %.3f (medians); pair ratios %.3f\n", backend, median(with), median(without), ratios)
	return []row{{Scenario: "python", Metric: metric, Rawstack: median(with), Peer: "--no-python", PeerVal: median(without), Better: "lower",
		Note: fmt.Sprintf("%s; median of %d alternating pair ratios %.3fx (goal ≤ 1.05x)", map[string]string{"perf": "frames read at each sample's wakeup", "ebpf": "frames read in BPF at the sample"}[backend], len(ratios), median(ratios))}}, nil
}

// pyenvPython returns pyenv's python of a minor version ("3.12"), "" if
// none is installed.
func pyenvPython(minor string) string {
	root := filepath.Join(os.Getenv("HOME"), ".pyenv")
	if out, err := exec.Command("pyenv", "root").Output(); err == nil {
		root = strings.TrimSpace(string(out))
	}
	m, _ := filepath.Glob(filepath.Join(root, "versions", minor+".*", "bin", "python"+minor))
	if len(m) == 0 {
		return ""
	}
	return m[0]
}

// startPython runs python with args and waits for its "ready" line.
func startPython(python string, args ...string) (*exec.Cmd, *bufio.Reader, error) {
	cmd := exec.Command(python, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, fmt.Errorf("%s %v not ready: %q %v", python, args, line, err)
	}
	return cmd, br, nil
}

func pythonSnapshot(cfg *config, cli string) ([]row, error) {
	const metric = "ms snapshot end to end, 50 Python threads, mixed stacks"
	python := "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		return absent("python", metric, "Debian's python3.11 not installed")
	}
	if _, err := os.Stat("/usr/share/gdb/auto-load/usr/bin/python3.11-gdb.py"); err != nil {
		return absent("python", metric, "gdb's py-bt for python3.11 not installed (apt-get install python3.11-dbg)")
	}
	if _, err := exec.LookPath("gdb"); err != nil {
		return absent("python", metric, "gdb not installed")
	}
	target, _, err := startPython(python, testdataPath(filepath.Join("platform", "linux", "cpython", "testdata", "threads.py")), strconv.Itoa(pythonThreads))
	if err != nil {
		return nil, err
	}
	defer func() {
		target.Process.Kill()
		target.Wait()
	}()
	pid := strconv.Itoa(target.Process.Pid)
	// Both tools must see every thread in level3_py: a check of each
	// side's output, on the first pair.
	count := func(out []byte, sub string) int { return bytes.Count(out, []byte(sub)) }
	pairs := 11
	if cfg.short {
		pairs = 3 // -short: a smoke run, not a figure
	}
	var raw, gdb, ratios []float64
	var stopped []float64
	for i := 0; i < pairs; i++ {
		var r, g float64
		err := inTurn(i,
			func() error {
				var stderr bytes.Buffer
				cmd := exec.Command(cli, "snapshot", "-p", pid, "--stats")
				cmd.Stderr = &stderr
				start := time.Now()
				out, err := cmd.Output()
				r = ms(time.Since(start))
				if err != nil {
					return fmt.Errorf("rawstack snapshot: %v: %s", err, stderr.String())
				}
				if n := count(out, "    level3_py ("); n != pythonThreads-1 {
					return fmt.Errorf("rawstack snapshot shows level3_py in %d threads, want %d", n, pythonThreads-1)
				}
				d, ok := statsStopped(stderr.Bytes())
				if !ok {
					return fmt.Errorf("rawstack snapshot --stats printed no threads stopped line: %.300s", stderr.String())
				}
				stopped = append(stopped, d)
				return nil
			},
			func() error {
				start := time.Now()
				out, err := exec.Command("gdb", "-batch", "-p", pid, "-ex", "thread apply all py-bt").CombinedOutput()
				g = ms(time.Since(start))
				if err != nil {
					return fmt.Errorf("gdb: %v: %.500s", err, out)
				}
				if n := count(out, ", in level3_py"); n != pythonThreads-1 {
					return fmt.Errorf("gdb py-bt shows level3_py in %d threads, want %d", n, pythonThreads-1)
				}
				return nil
			})
		if err != nil {
			return nil, err
		}
		raw, gdb, ratios = append(raw, r), append(gdb, g), append(ratios, g/r)
	}
	fmt.Fprintf(cfg.logger, "  rawstack %.1f ms, gdb py-bt %.1f ms (medians); pair ratios gdb/rawstack %.2f\n", median(raw), median(gdb), ratios)
	return []row{
		{Scenario: "python", Metric: metric, Rawstack: median(raw), Peer: "gdb thread apply all py-bt", PeerVal: median(gdb), Better: "lower",
			Note: fmt.Sprintf("Debian python3.11; median of %d alternating pair ratios %.1fx; threads stopped %.2f ms (median, --stats)", len(ratios), median(ratios), median(stopped))},
	}, nil
}

// pythonShareTolerance is how far apart (absolute) rawstack's and perf's
// shares of the three functions may be: both sample the same process for
// the same 3 s (rawstack at 999 Hz, perf at 499 Hz: ~2000 and ~1400
// samples in the three functions), so a share's sampling error is about
// 0.013 and 0.05 is three standard deviations of the difference.
const pythonShareTolerance = 0.05

func pythonShares(cfg *config, cli string) ([]row, error) {
	const metric = "share of alpha_py/beta_py/gamma_py, CPython 3.12"
	python := pyenvPython("3.12")
	if python == "" {
		return absent("python", metric, "pyenv's CPython 3.12 not installed")
	}
	if _, err := exec.LookPath("perf"); err != nil {
		return absent("python", metric, "perf not installed")
	}
	names := []string{"alpha_py", "beta_py", "gamma_py"}
	target, out, err := startPython(python, "-X", "perf", testdataPath(filepath.Join("platform", "linux", "cpython", "testdata", "shares.py")), "5")
	if err != nil {
		return nil, err
	}
	pid := target.Process.Pid
	defer func() {
		target.Process.Kill()
		target.Wait()
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid))
	}()
	data := filepath.Join(cfg.work, "python-perf.data")
	rec := exec.Command("perf", "record", "-q", "--call-graph", "dwarf,16384", "-F", "499", "-o", data, "-p", strconv.Itoa(pid), "--", "sleep", "3")
	var perfOut bytes.Buffer
	rec.Stdout, rec.Stderr = &perfOut, &perfOut
	if err := rec.Start(); err != nil {
		return nil, err
	}
	trace := filepath.Join(cfg.work, "python-shares.rawstack")
	traceBPF := filepath.Join(cfg.work, "python-shares-ebpf.rawstack")
	bpfDone := make(chan error, 1)
	go func() {
		out, err := exec.Command(cli, "record", "-q", "--backend", "ebpf", "-o", traceBPF, "-F", "999", "-p", strconv.Itoa(pid), "--duration", "3s").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("rawstack record --backend ebpf: %v: %s", err, out)
		}
		bpfDone <- err
	}()
	recOut, recErr := exec.Command(cli, "record", "-q", "-o", trace, "-F", "999", "-p", strconv.Itoa(pid), "--duration", "3s").CombinedOutput()
	bpfErr := <-bpfDone
	if err := rec.Wait(); err != nil {
		return nil, fmt.Errorf("perf record: %v: %s", err, perfOut.String())
	}
	if recErr != nil {
		return nil, fmt.Errorf("rawstack record: %v: %s", recErr, recOut)
	}
	// The program's own view, printed when it ends (after 5 s).
	self := map[string]float64{}
	for {
		line, err := out.ReadString('\n')
		if f := strings.Fields(line); len(f) == 7 && f[0] == "shares" {
			for i := 1; i < 7; i += 2 {
				self[f[i]], _ = strconv.ParseFloat(f[i+1], 64)
			}
		}
		if err != nil {
			break
		}
	}
	// perf: the innermost py:: trampoline of each sample.
	sb, err := exec.Command("perf", "script", "-i", data, "-F", "ip,sym").Output()
	if err != nil {
		return nil, fmt.Errorf("perf script: %v", err)
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
	// rawstack: the innermost of the three among each folded stack's
	// Python frames.
	shares := func(trace string) (map[string]float64, error) {
		fb, err := exec.Command(cli, "convert", trace, "--to", "folded", "--no-debuginfod").Output()
		if err != nil {
			return nil, fmt.Errorf("rawstack convert: %v", err)
		}
		ours := map[string]float64{}
		for _, line := range strings.Split(strings.TrimSpace(string(fb)), "\n") {
			sp := strings.LastIndexByte(line, ' ')
			if sp < 0 {
				continue
			}
			n, _ := strconv.ParseFloat(line[sp+1:], 64)
			frames := strings.Split(line[:sp], ";")
			for i := len(frames) - 1; i >= 0; i-- {
				if f := frames[i]; f == names[0] || f == names[1] || f == names[2] {
					ours[f] += n
					break
				}
			}
		}
		return ours, nil
	}
	ours, err := shares(trace)
	if err != nil {
		return nil, err
	}
	norm := func(m map[string]float64) ([]float64, float64) {
		var sum float64
		for _, n := range names {
			sum += m[n]
		}
		out := make([]float64, len(names))
		for i, n := range names {
			out[i] = m[n] / sum
		}
		return out, sum
	}
	o, on := norm(ours)
	p, pn := norm(theirs)
	s, _ := norm(self)
	var rows []row
	for i, n := range names {
		rows = append(rows, row{Scenario: "python", Metric: "share of " + n + ", CPython 3.12, same process (perf back end)", Rawstack: o[i], Peer: "perf -X perf", PeerVal: p[i],
			Note: fmt.Sprintf("the program's own timing %.3f", s[i])})
	}
	worstOf := func(o []float64) (float64, string) {
		worst := 0.0
		for i := range names {
			worst = max(worst, math.Abs(o[i]-p[i]))
		}
		if worst > pythonShareTolerance || math.IsNaN(worst) {
			return worst, "DISAGREE"
		}
		return worst, "agree"
	}
	worst, verdict := worstOf(o)
	rows = append(rows, row{Scenario: "python", Metric: "largest share difference, rawstack (perf back end) vs perf -X perf", Rawstack: worst, Better: "lower",
		Note: fmt.Sprintf("%s (tolerance %.2f); the perf back end reads Python frames at each sample's wakeup, tens of µs after it", verdict, pythonShareTolerance)})
	fmt.Fprintf(cfg.logger, "  shares %v: rawstack (perf) %.3f (%.0f samples), perf -X perf %.3f (%.0f samples), the program's timing %.3f\n", names, o, on, p, pn, s)
	if bpfErr != nil {
		if err := needPeer(bpfErr.Error()); err != nil {
			return nil, err
		}
		return append(rows, row{Scenario: "python", Metric: "largest share difference, rawstack (eBPF back end) vs perf -X perf", Note: bpfErr.Error()}), nil
	}
	bpfShares, err := shares(traceBPF)
	if err != nil {
		return nil, err
	}
	b, bn := norm(bpfShares)
	fmt.Fprintf(cfg.logger, "  shares %v: rawstack (eBPF) %.3f (%.0f samples)\n", names, b, bn)
	worst, verdict = worstOf(b)
	return append(rows, row{Scenario: "python", Metric: "largest share difference, rawstack (eBPF back end) vs perf -X perf", Rawstack: worst, Better: "lower",
		Note: fmt.Sprintf("%s (tolerance %.2f); frames read in BPF at the sample; shares %.3f/%.3f/%.3f", verdict, pythonShareTolerance, b[0], b[1], b[2])}), nil
}
