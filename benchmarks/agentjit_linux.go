package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// The agentjit scenario (issue 34): what naming JIT frames from the
// runtimes' own metadata costs `rawstack agent`. The agent (rawstack-ebpf
// agent at its default 19 Hz, raw OTLP to an endpoint in this process)
// records the whole host for the same time over two loads of two busy
// threads each: native only (benchmarks/testdata/twothreads.c), or node
// and a JVM, each running the JIT test programs with no flag
// (cmd/rawstack/testdata/jit: shop.js, Shop.java, whose hot chains the
// JITs inline). A pair runs both, in alternating order, each load
// started fresh and given time to warm up before the agent starts; the
// figure is the median of the pairs' ratios of the agent's CPU time
// after its first half minute (a daemon's steady state: its start-up
// reads every process of the host), and a row gives the whole run's
// beside it.
// Goal: ≤ 1.2x.
func init() {
	register(&scenario{name: "agentjit", order: 221, run: runAgentJIT})
}

func runAgentJIT(cfg *config) ([]row, error) {
	const metric = "agent CPU (ms per minute) with node and a JVM busy, against native-only load"
	if os.Geteuid() != 0 {
		return absent("agentjit", metric, "needs root (CAP_BPF, CAP_PERFMON)")
	}
	node, err1 := exec.LookPath("node")
	java, err2 := exec.LookPath("java")
	javac, err3 := exec.LookPath("javac")
	if err1 != nil || err2 != nil || err3 != nil {
		return absent("agentjit", metric, "node, java or javac not installed")
	}
	rawstack, twothreads, err := agentBuilds(cfg)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.work, "agentjit")
	os.MkdirAll(dir, 0o755)
	for _, name := range []string{"cmd/rawstack/testdata/jit/shop.js", "cmd/rawstack/testdata/jit/Shop.java"} {
		src, err := os.ReadFile(testdataPath(name))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(name)), src, 0o644); err != nil {
			return nil, err
		}
	}
	if out, err := exec.Command(javac, "-d", dir, filepath.Join(dir, "Shop.java")).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("javac Shop.java: %v: %s", err, out)
	}
	// The agent's first half minute is start-up: it reads every process
	// of the host and makes the tables of the modules its first samples
	// run (420 ms CPU a minute from 10 s on, 75 from 30 s on, on native
	// load here).
	d, early, warm, pairs := 60*time.Second, 30*time.Second, 3*time.Second, 11
	if cfg.short {
		d, early, pairs = 12*time.Second, 4*time.Second, 3
	}
	ep, err := newCountingEndpoint()
	if err != nil {
		return nil, err
	}
	defer ep.close()
	secs := fmt.Sprint(int((warm + d + 10*time.Second).Seconds()))
	loads := map[bool][][]string{
		false: {{twothreads, secs}},
		true:  {{node, "shop.js", "1000000000"}, {java, "-cp", dir, "Shop", secs}},
	}
	var samples, whole [2][]float64
	run := func(jit bool) (float64, error) {
		var procs []*exec.Cmd
		defer func() {
			for _, p := range procs {
				p.Process.Kill()
				p.Wait()
			}
		}()
		for _, argv := range loads[jit] {
			c := exec.Command(argv[0], argv[1:]...)
			c.Dir = dir
			if err := c.Start(); err != nil {
				return 0, err
			}
			procs = append(procs, c)
		}
		time.Sleep(warm)
		ep.samples.Store(0)
		r, err := runFor(exec.Command(filepath.Join(filepath.Dir(rawstack), "rawstack-ebpf"), "agent", "--otlp-endpoint", ep.addr), d, early, syscall.SIGTERM)
		if err != nil {
			return 0, fmt.Errorf("agent: %w", err)
		}
		if _, err := ep.received(); err != nil {
			return 0, err
		}
		i := 0
		if jit {
			i = 1
		}
		samples[i] = append(samples[i], float64(ep.samples.Load()))
		whole[i] = append(whole[i], r.cpuMs/r.minutes)
		return r.steadyMs / (d - early).Minutes(), nil
	}
	withJIT, native, ratios, err := pairRatios(pairs, func() (float64, error) { return run(true) }, func() (float64, error) { return run(false) })
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.logger, "  agent CPU ms/min after %v with node+JVM %.0f, native %.0f (medians; whole run %.0f, %.0f); samples received %.0f, %.0f; pair ratios %.3f\n",
		early, median(withJIT), median(native), median(whole[1]), median(whole[0]), median(samples[1]), median(samples[0]), ratios)
	return []row{
		{Scenario: "agentjit", Metric: fmt.Sprintf("%s, after its first %v", metric, early), Rawstack: median(withJIT), Peer: "native-only load", PeerVal: median(native), Better: "lower",
			Note: fmt.Sprintf("%v per agent run, median of %d alternating pair ratios %.3fx (goal <= 1.2x); load %s", d, len(ratios), median(ratios), loadAvg())},
		{Scenario: "agentjit", Metric: metric + ", whole run (start-up included)", Rawstack: median(whole[1]), Peer: "native-only load", PeerVal: median(whole[0]), Better: "lower"},
		{Scenario: "agentjit", Metric: "samples its endpoint received, node and a JVM busy", Rawstack: median(samples[1]), Peer: "native-only load", PeerVal: median(samples[0]), Better: "higher"},
	}, nil
}
