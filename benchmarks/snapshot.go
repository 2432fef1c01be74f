package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rawstack/rawstack/platform/snapshot"
)

// The snapshot scenario (issue 5a) stacks every thread of a 100-thread
// -O2 -fomit-frame-pointer C program blocked in a deep call chain, end to
// end as a user runs it: `rawstack snapshot -p PID`, the default command,
// against `eu-stack -p PID` and gdb's `thread apply all bt`, runs
// interleaved. rawstack keeps symbol indexes in $XDG_CACHE_HOME by
// default: the headline pairs run it with a warm cache (what a user sees
// from the second snapshot of a program on), a second set of pairs with
// an empty one each run (the first snapshot). Both cache directories are
// the benchmark's own. It also times `--no-symbols`, how long the
// target's threads stay stopped (a separate `--stats` run) and the
// library call (snapshot.Process) with a warm table cache, as an
// embedding host would use it.
func init() {
	register(&scenario{name: "snapshot", order: 50, run: runSnapshot})
}

const snapshotThreads = 100

func runSnapshot(cfg *config) ([]row, error) {
	src := filepath.Join("platform", "snapshot", "testdata", "threads.c")
	if _, err := os.Stat(src); err != nil {
		src = filepath.Join("..", src) // run from inside benchmarks/
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		return absent("snapshot", "ms", "gcc not installed: no fixture")
	}
	fixture := filepath.Join(cfg.work, "snapthreads")
	if out, err := exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-pthread", "-o", fixture, src).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gcc: %v\n%s", err, out)
	}
	// The floor: a C tracer that only stops the threads and reads their
	// registers (benchmarks/testdata/ptfloor.c).
	floor := filepath.Join(cfg.work, "ptfloor")
	root := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(src))))
	floorSrc := filepath.Join(root, "benchmarks", "testdata", "ptfloor.c")
	if out, err := exec.Command("gcc", "-O2", "-o", floor, floorSrc).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gcc %s: %v\n%s", floorSrc, err, out)
	}
	cli, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}

	target := exec.Command(fixture, strconv.Itoa(snapshotThreads), "10")
	stdout, err := target.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := target.Start(); err != nil {
		return nil, err
	}
	defer func() {
		target.Process.Kill()
		target.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		return nil, fmt.Errorf("fixture not ready: %q %v", line, err)
	}
	pid := strconv.Itoa(target.Process.Pid)

	// A first library call says whether ptrace works here at all.
	cache := snapshot.NewTableCache()
	snap, err := snapshot.Process(target.Process.Pid, &snapshot.Options{Tables: cache})
	if err != nil {
		return absent("snapshot", "ms", fmt.Sprintf("cannot snapshot here: %v", err))
	}
	if len(snap.Threads) != snapshotThreads+1 {
		return nil, fmt.Errorf("snapshot saw %d threads, want %d", len(snap.Threads), snapshotThreads+1)
	}

	// At least 11 rounds: the headline figure is the median of the
	// per-round ratios eu-stack/rawstack, each round running the two
	// back to back, in alternating order (A B, B A, ...), so load that
	// comes and goes falls on both sides of a pair.
	// gdb takes about a second a run: 11 of them, 3 with -short. A
	// round without gdb takes ~0.1 s, and on a shared machine single
	// pair ratios ranged from 3.6x to 33x: 25 rounds.
	runs, gdbRuns := 25, 11
	if cfg.short {
		runs, gdbRuns = 11, 3
	}
	type tool struct {
		name string
		args []string
		ms   []float64
		out  []byte
		err  []byte
		skip string
	}
	tools := []*tool{
		{name: "rawstack-help", args: []string{cli, "help"}},
		{name: "rawstack-nosym", args: []string{cli, "snapshot", "-p", pid, "--no-symbols"}},
		// Symbolized, as eu-stack prints by default.
		{name: "rawstack", args: []string{cli, "snapshot", "-p", pid}},
		{name: "rawstack-cold", args: []string{cli, "snapshot", "-p", pid}},
		// --stats adds a line on stderr with how long the threads were
		// stopped.
		{name: "rawstack-stats", args: []string{cli, "snapshot", "-p", pid, "--stats"}},
		{name: "eu-stack", args: []string{"eu-stack", "-p", pid}},
		// The ptrace floor, detaching each thread, and exiting instead.
		{name: "floor-detach", args: []string{floor, pid, "detach"}},
		{name: "floor-exit", args: []string{floor, pid, "exit"}},
		{name: "gdb", args: []string{"gdb", "-batch", "-nx", "-p", pid, "-ex", "thread apply all bt"}},
	}
	warmCache := filepath.Join(cfg.work, "snapshot-cache")
	if err := os.RemoveAll(warmCache); err != nil {
		return nil, err
	}
	for _, t := range tools {
		if _, err := exec.LookPath(t.args[0]); err != nil {
			t.skip = t.args[0] + " not installed"
		}
	}
	byName := map[string]*tool{}
	for _, t := range tools {
		byName[t.name] = t
	}
	raw, cold, eu, gdb := byName["rawstack"], byName["rawstack-cold"], byName["eu-stack"], byName["gdb"]
	runTool := func(t *tool) {
		if t.skip != "" {
			return
		}
		var stderr bytes.Buffer
		cmd := exec.Command(t.args[0], t.args[1:]...)
		cmd.Stderr = &stderr
		if strings.HasPrefix(t.name, "rawstack") {
			cache := warmCache
			if t == cold {
				d, err := os.MkdirTemp(cfg.work, "snapshot-cold-")
				if err != nil {
					t.skip = err.Error()
					return
				}
				defer os.RemoveAll(d)
				cache = d
			}
			cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+cache)
		}
		start := time.Now()
		out, err := cmd.Output()
		d := time.Since(start)
		if err != nil {
			t.skip = fmt.Sprintf("%s failed: %v", t.name, err)
			return
		}
		t.ms = append(t.ms, ms(d))
		t.out, t.err = out, stderr.Bytes()
	}
	runTool(raw) // warms the cache; not a figure
	raw.ms = nil
	var coldLib, warm, stopped, cliStopped, pairs, coldPairs []float64
	for i := 0; i < runs; i++ {
		runTool(byName["rawstack-help"])
		if i%2 == 0 {
			runTool(byName["floor-detach"])
			runTool(byName["floor-exit"])
		} else {
			runTool(byName["floor-exit"])
			runTool(byName["floor-detach"])
		}
		runTool(byName["rawstack-nosym"])
		st := byName["rawstack-stats"]
		runTool(st)
		if st.skip == "" {
			d, ok := statsStopped(st.err)
			if !ok {
				return nil, fmt.Errorf("rawstack snapshot --stats printed no threads stopped line: %.300s", st.err)
			}
			cliStopped = append(cliStopped, d)
		}
		// The pairs: rawstack (warm cache), eu-stack, rawstack (cold
		// cache) in even rounds, the other way round in odd ones; each
		// rawstack run is paired with the eu-stack run next to it.
		round := []*tool{raw, eu, cold}
		if i%2 == 1 {
			round = []*tool{cold, eu, raw}
		}
		nr, nc, ne := len(raw.ms), len(cold.ms), len(eu.ms)
		for _, t := range round {
			runTool(t)
		}
		if len(eu.ms) > ne {
			if len(raw.ms) > nr {
				pairs = append(pairs, eu.ms[ne]/raw.ms[nr])
			}
			if len(cold.ms) > nc {
				coldPairs = append(coldPairs, eu.ms[ne]/cold.ms[nc])
			}
		}
		if i < gdbRuns {
			runTool(gdb)
		}
		start := time.Now()
		if _, err := snapshot.Process(target.Process.Pid, nil); err != nil {
			return nil, err
		}
		coldLib = append(coldLib, ms(time.Since(start)))
		start = time.Now()
		s, err := snapshot.Process(target.Process.Pid, &snapshot.Options{Tables: cache})
		if err != nil {
			return nil, err
		}
		warm = append(warm, ms(time.Since(start)))
		stopped = append(stopped, ms(s.Stopped))
	}
	for _, t := range tools {
		// A peer missing or failing: a note on a laptop, an error in CI.
		if t.skip != "" {
			if strings.HasPrefix(t.name, "rawstack") {
				return nil, errors.New(t.skip)
			}
			if err := needPeer(t.skip); err != nil {
				return nil, err
			}
			t.ms = nil // runs before a failure are not a figure
			if t == eu {
				pairs, coldPairs = nil, nil
			}
		}
		fmt.Fprintf(cfg.logger, "  %s: %d runs, median %.2f ms\n", t.name, len(t.ms), median(t.ms))
	}
	fmt.Fprintf(cfg.logger, "  pair ratios eu-stack/rawstack, warm cache: %.2f\n", pairs)
	fmt.Fprintf(cfg.logger, "  pair ratios eu-stack/rawstack, cold cache: %.2f\n", coldPairs)
	note := func(t *tool) string {
		if t.skip != "" {
			return t.skip
		}
		return ""
	}
	load, _ := os.ReadFile("/proc/loadavg")
	loadNote := "loadavg " + strings.Join(strings.Fields(string(load))[:3], " ")
	// CPU pressure: the share of the last 10 s in which tasks waited
	// for a CPU, which the snapshot itself consults (one tracer thread
	// when the CPUs are contended).
	if b, err := os.ReadFile("/proc/pressure/cpu"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 && f[0] == "some" {
			loadNote += ", CPU pressure " + strings.TrimPrefix(f[1], "avg10=") + "%"
		}
	}
	e2e := fmt.Sprintf("default command, warm symbol-index cache (second run on): median of %d pair ratios %.2fx (goal ≥ 10x); %s",
		len(pairs), median(pairs), loadNote)
	coldE2E := fmt.Sprintf("empty symbol-index cache each run (first run): median of %d pair ratios %.2fx", len(coldPairs), median(coldPairs))
	if len(pairs) == 0 {
		e2e = "no pairs: " + strings.TrimSpace(note(raw)+" "+note(eu))
		coldE2E = e2e
	}
	rows := []row{
		{Scenario: "snapshot", Metric: "ms end to end, 100 threads, no symbols", Rawstack: median(byName["rawstack-nosym"].ms), Better: "lower",
			Note: strings.TrimSuffix("target ≤ 10 ms; "+note(byName["rawstack-nosym"]), "; ")},
		{Scenario: "snapshot", Metric: "ms end to end, 100 threads, symbolized", Rawstack: median(raw.ms), Peer: "eu-stack -p", PeerVal: median(eu.ms), Better: "lower", Note: e2e},
		{Scenario: "snapshot", Metric: "ms end to end, 100 threads, symbolized, cold cache", Rawstack: median(cold.ms), Peer: "eu-stack -p", PeerVal: median(eu.ms), Better: "lower", Note: coldE2E},
		{Scenario: "snapshot", Metric: "ms end to end, 100 threads, symbolized", Rawstack: median(raw.ms), Peer: "gdb thread apply all bt", PeerVal: median(gdb.ms), Better: "lower", Note: note(gdb)},
		{Scenario: "snapshot", Metric: "ms threads stopped, CLI", Rawstack: median(cliStopped), Better: "lower", Note: "first PTRACE_SEIZE to last detach, rawstack snapshot --stats (runs of their own)"},
		{Scenario: "snapshot", Metric: "ms process start, rawstack help", Rawstack: median(byName["rawstack-help"].ms), Better: "lower", Note: "the floor under the end-to-end figures"},
		{Scenario: "snapshot", Metric: "ms ptrace floor, 100 threads: C tracer, seize+interrupt+wait+regs, detach each", Rawstack: median(byName["floor-detach"].ms), Peer: "eu-stack -p", PeerVal: median(eu.ms), Better: "lower",
			Note: "benchmarks/testdata/ptfloor.c: no maps, stacks, unwind, names or output; the most any ptrace snapshot tool could be faster than eu-stack here"},
		{Scenario: "snapshot", Metric: "ms ptrace floor, 100 threads, the kernel detaching at exit", Rawstack: median(byName["floor-exit"].ms), Peer: "eu-stack -p", PeerVal: median(eu.ms), Better: "lower", Note: "the same, exiting with the threads attached"},
		{Scenario: "snapshot", Metric: "ms library call, cold tables", Rawstack: median(coldLib), Better: "lower", Note: "snapshot.Process, nothing cached"},
		{Scenario: "snapshot", Metric: "ms library call, warm tables", Rawstack: median(warm), Better: "lower", Note: "snapshot.Process with a TableCache"},
		{Scenario: "snapshot", Metric: "ms threads stopped, library", Rawstack: median(stopped), Better: "lower", Note: "first PTRACE_SEIZE to last detach, warm library call"},
	}
	if raw.out != nil && eu.out != nil {
		rf, rn := frameCounts(raw.out)
		ef, en := frameCounts(eu.out)
		note := "should be equal"
		if rf != ef || rn != en {
			note = "DIFFER: compare the outputs"
		}
		rows = append(rows,
			row{Scenario: "snapshot", Metric: "frames printed", Rawstack: float64(rf), Peer: "eu-stack -p", PeerVal: float64(ef), Note: note},
			row{Scenario: "snapshot", Metric: "frames named", Rawstack: float64(rn), Peer: "eu-stack -p", PeerVal: float64(en), Note: note + " (symbolized output, as eu-stack's default)"})
	}
	return rows, nil
}

// frameCounts counts the "#N 0xPC [name]" lines of an eu-stack-style
// listing and those of them that name a function.
func frameCounts(out []byte) (frames, named int) {
	for _, l := range bytes.Split(out, []byte("\n")) {
		f := bytes.Fields(l)
		if len(f) < 2 || len(f[0]) < 2 || f[0][0] != '#' || !bytes.HasPrefix(f[1], []byte("0x")) {
			continue
		}
		frames++
		if len(f) > 2 && !bytes.Contains(f[2], []byte("+0x")) && !bytes.Contains(f[2], []byte("@0x")) {
			named++
		}
	}
	return frames, named
}

// statsStopped returns the "threads stopped" duration, in ms, of a
// `rawstack snapshot --stats` stderr.
func statsStopped(stderr []byte) (float64, bool) {
	_, rest, ok := bytes.Cut(stderr, []byte("threads stopped "))
	if !ok {
		return 0, false
	}
	if i := bytes.IndexByte(rest, ')'); i > 0 {
		rest = rest[:i]
	}
	d, err := time.ParseDuration(string(rest))
	return ms(d), err == nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
