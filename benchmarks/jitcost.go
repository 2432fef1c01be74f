package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The jitcost scenario (issue 34): what naming JIT frames from the
// runtimes' own metadata (the V8 and HotSpot readers, on by default, no
// flag in the target) costs the program recorded. Node running shop.js
// and a JVM running Shop.java (cmd/rawstack/testdata/jit: a chain of
// three functions and a lambda the JIT inlines), each a fixed amount of
// work whose CPU time the process prints (node preloads
// benchmarks/testdata/cpuexit.js; Shop.java has a rounds mode), are
// recorded at 999 Hz by each back end with the readers and with
// --no-jit, in alternating pairs; the row is the median of the pair
// ratios (goal ≤ 1.05×), end to end as a user runs it.
func init() {
	register(&scenario{name: "jitcost", order: 151, run: runJITCost})
}

func runJITCost(cfg *config) ([]row, error) {
	cli, err := buildCompanions(cfg, "rawstack-ebpf")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.work, "jitcost")
	os.MkdirAll(dir, 0o755)
	for _, name := range []string{"benchmarks/testdata/cpuexit.js", "cmd/rawstack/testdata/jit/shop.js", "cmd/rawstack/testdata/jit/Shop.java"} {
		src, err := os.ReadFile(testdataPath(name))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(name)), src, 0o644); err != nil {
			return nil, err
		}
	}
	pairs, nodeRounds, javaRounds := 11, "3000000", "30000"
	if cfg.short {
		pairs, nodeRounds, javaRounds = 3, "1500000", "15000"
	}
	var rows []row
	type target struct {
		runtime string
		argv    []string
		why     string
	}
	var targets []target
	if node, err := exec.LookPath("node"); err == nil {
		targets = append(targets, target{"node", []string{node, "--require", "./cpuexit.js", "shop.js", nodeRounds}, ""})
	} else {
		targets = append(targets, target{"node", nil, "node not installed"})
	}
	java, err1 := exec.LookPath("java")
	javac, err2 := exec.LookPath("javac")
	switch {
	case err1 != nil || err2 != nil:
		targets = append(targets, target{"java", nil, "java or javac not installed"})
	default:
		if out, err := exec.Command(javac, "-d", dir, filepath.Join(dir, "Shop.java")).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("javac Shop.java: %v: %s", err, out)
		}
		targets = append(targets, target{"java", []string{java, "-cp", dir, "Shop", "rounds", javaRounds}, ""})
	}
	for _, tg := range targets {
		for _, backend := range []string{"perf", "ebpf"} {
			metric := fmt.Sprintf("CPU s of a %s program whose hot chain is inlined, %s back end at 999 Hz", tg.runtime, backend)
			if tg.argv == nil {
				more, err := absent("jitcost", metric, tg.why)
				if err != nil {
					return nil, err
				}
				rows = append(rows, more...)
				continue
			}
			r, err := jitCost(cfg, cli, dir, backend, metric, tg.argv, pairs)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// jitCost records argv at 999 Hz with backend, with the JIT readers and
// with --no-jit in alternating pairs, and returns the row of the CPU
// seconds the program printed.
func jitCost(cfg *config, cli, dir, backend, metric string, argv []string, pairs int) (row, error) {
	run := func(noJIT bool) (float64, error) {
		args := []string{"record", "-q", "--backend", backend, "-F", "999", "-o", filepath.Join(dir, "jitcost.rawstack")}
		if noJIT {
			args = append(args, "--no-jit")
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(cli, append(args, append([]string{"--"}, argv...)...)...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("rawstack record --backend %s: %v: %s", backend, err, stderr.String())
		}
		f := strings.Fields(stdout.String())
		if len(f) < 2 || f[len(f)-2] != "ok" {
			return 0, fmt.Errorf("%s printed %q, not its CPU time", argv[0], stdout.String())
		}
		return strconv.ParseFloat(f[len(f)-1], 64)
	}
	with, without, ratios, err := pairRatios(pairs, func() (float64, error) { return run(false) }, func() (float64, error) { return run(true) })
	if err != nil {
		if err := needPeer(err.Error()); err != nil {
			return row{}, err
		}
		return row{Scenario: "jitcost", Metric: metric, Note: err.Error()}, nil
	}
	fmt.Fprintf(cfg.logger, "  %s, %s back end: CPU s with the JIT readers %.3f, --no-jit %.3f (medians); pair ratios %.3f\n", argv[0], backend, median(with), median(without), ratios)
	return row{Scenario: "jitcost", Metric: metric, Rawstack: median(with), Peer: "--no-jit", PeerVal: median(without), Better: "lower",
		Note: fmt.Sprintf("median of %d alternating pair ratios %.3fx (goal ≤ 1.05x)", len(ratios), median(ratios))}, nil
}
