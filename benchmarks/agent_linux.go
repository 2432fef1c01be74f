package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The agent scenario (issues 22, 38): `rawstack agent` — the whole host
// through the eBPF back end, raw OTLP batches to an endpoint in this
// process — side by side with its real peer, the OpenTelemetry eBPF
// profiler (the binary RAWSTACK_BENCH_OTEL_PROFILER names, into an
// endpoint of its own; without it the row says it is absent), and with
// `perf record -a -g` at the same frequency, at 20 Hz (a fleet daemon's
// rate) and 100 Hz, on one load for the whole scenario: a CPU-bound
// two-thread program (benchmarks/testdata/twothreads.c), a program whose
// stacks never repeat (randstack.c), and short-lived processes (a shell
// spawning /bin/true, 50 a second). Each recorder runs for the same
// duration, in turn (agent, peer, perf, agent, ...): 10 minutes each, 20
// seconds with -short.
//
// The agent runs as deploy/rawstack-agent.service runs it: rawstack-ebpf
// agent, one process that streams OTLP itself. Metrics: the recorder's
// CPU time (its whole tree), per minute, over the whole run (start-up,
// which reads every process of the host, and exit included) and after
// the first minute (7 s with -short); its peak RSS (the sum of the
// tree's peaks); its RSS growth after the first minute: the resident set
// at the end minus the one then, which stays near zero when nothing grows
// with the processes seen; and the samples its endpoint received. Beside
// each agent cell runs the floor: a Go program that only wakes once a
// second (benchmarks/testdata/wakefloor), what any Go daemon pays before
// it does anything.
func init() {
	register(&scenario{name: "agent", order: 220, run: runAgentScenario})
}

var reAgentTaken = regexp.MustCompile(`(\d+) taken, `)

type agentRun struct {
	cpuMs          float64 // recorder tree CPU, ms
	steadyMs       float64 // of which after the first minute (start-up excluded)
	peakMiB        float64 // sum of the tree's peak RSS
	earlyMiB, late float64 // tree RSS after the first minute and at the end
	samples        float64
	minutes        float64
}

func runAgentScenario(cfg *config) ([]row, error) {
	if os.Geteuid() != 0 {
		return absent("agent", "skipped", "needs root (CAP_BPF, CAP_PERFMON)")
	}
	rawstack, twothreads, err := agentBuilds(cfg)
	if err != nil {
		return nil, err
	}
	randstack, err := buildC(cfg, "randstack.c", "-O2", "-fno-omit-frame-pointer")
	if err != nil {
		return nil, err
	}
	// The floor (benchmarks/testdata/wakefloor): a Go program that only
	// wakes once a second, run beside each agent cell with one P, as the
	// agent's two processes run.
	floor := filepath.Join(cfg.work, "wakefloor")
	b := exec.Command("go", "build", "-o", floor, "github.com/rawstack/rawstack/benchmarks/testdata/wakefloor")
	b.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := b.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build wakefloor: %v\n%s", err, out)
	}
	perf, perfErr := exec.LookPath("perf")
	d, early := 10*time.Minute, time.Minute
	if cfg.short {
		d, early = 20*time.Second, 7*time.Second
	}
	// While iterating: RAWSTACK_BENCH_AGENT_DURATION=2m runs shorter cells
	// (the first minute stays the first minute when they are longer than
	// two), RAWSTACK_BENCH_AGENT_HZ=20 one frequency only,
	// RAWSTACK_BENCH_AGENT_PERF=0 the agent alone. The README's figures
	// come from the full run.
	if v := os.Getenv("RAWSTACK_BENCH_AGENT_DURATION"); v != "" {
		if d, err = time.ParseDuration(v); err != nil || d < 10*time.Second {
			return nil, fmt.Errorf("RAWSTACK_BENCH_AGENT_DURATION=%q: want a duration of at least 10s", v)
		}
		if early = time.Minute; d < 2*early {
			early = d / 3
		}
	}
	hzs := []string{"20", "100"}
	if v := os.Getenv("RAWSTACK_BENCH_AGENT_HZ"); v != "" {
		hzs = strings.Split(v, ",")
	}
	ep, err := newCountingEndpoint()
	if err != nil {
		return nil, err
	}
	defer ep.close()

	// The peer's endpoint, its own: each endpoint's count is of one
	// recorder's samples.
	peerEP, err := newCountingEndpoint()
	if err != nil {
		return nil, err
	}
	defer peerEP.close()
	otelProfiler := os.Getenv("RAWSTACK_BENCH_OTEL_PROFILER")

	// The load: the two programs for the whole run (their CPU time in
	// seconds, more than the run lasts; killed at the end), and 50
	// short-lived processes a second.
	for _, l := range []*exec.Cmd{exec.Command(twothreads, "100000"), exec.Command(randstack, "100000")} {
		if err := l.Start(); err != nil {
			return nil, err
		}
		defer func() { l.Process.Kill(); l.Wait() }()
	}
	stop := make(chan struct{})
	var spawned atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if exec.Command("/bin/true").Run() == nil {
					spawned.Add(1)
				}
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	var rows []row
	start := time.Now()
	for _, hz := range hzs {
		// rawstack-ebpf, as the service unit runs it (deploy/), and the
		// floor beside it.
		var fl agentRun
		var flErr error
		flDone := make(chan struct{})
		go func() {
			defer close(flDone)
			c := exec.Command(floor)
			c.Env = append(os.Environ(), "GOMAXPROCS=1")
			fl, flErr = runFor(c, d, early, syscall.SIGTERM)
		}()
		ep.samples.Store(0)
		agent, err := runFor(exec.Command(filepath.Join(filepath.Dir(rawstack), "rawstack-ebpf"), "agent", "--otlp-endpoint", ep.addr, "-F", hz), d, early, syscall.SIGTERM)
		<-flDone
		if err != nil {
			return nil, fmt.Errorf("agent -F %s: %w", hz, err)
		}
		if flErr != nil {
			return nil, fmt.Errorf("wakefloor: %w", flErr)
		}
		if _, err := ep.received(); err != nil {
			return nil, err
		}
		agentGot := ep.samples.Load()
		// The OpenTelemetry eBPF profiler, as its README runs it, into
		// its own endpoint.
		var or agentRun
		var orGot int64
		orNote := "the OpenTelemetry eBPF profiler: absent (RAWSTACK_BENCH_OTEL_PROFILER names its binary; README says how to build it)"
		if otelProfiler != "" {
			peerEP.samples.Store(0)
			or, err = runFor(exec.Command(otelProfiler, "-collection-agent", peerEP.addr, "-disable-tls", "-samples-per-second", hz), d, early, syscall.SIGTERM)
			if err != nil {
				return nil, fmt.Errorf("%s -samples-per-second %s: %w", otelProfiler, hz, err)
			}
			if _, err := peerEP.received(); err != nil {
				return nil, err
			}
			orGot = peerEP.samples.Load()
			orNote = ""
			fmt.Fprintf(cfg.logger, "  %s Hz: OTel eBPF profiler %.0f ms CPU (%.0f after %v) in %.1f min, peak %.1f MiB, RSS %.1f -> %.1f MiB, %d samples received\n",
				hz, or.cpuMs, or.steadyMs, early, or.minutes, or.peakMiB, or.earlyMiB, or.late, orGot)
		}
		var pr agentRun
		peer := ""
		if perfErr == nil && os.Getenv("RAWSTACK_BENCH_AGENT_PERF") != "0" {
			out := filepath.Join(cfg.work, "agent-perf.data")
			pr, err = runFor(exec.Command(perf, "record", "-q", "-a", "-g", "-F", hz, "-o", out), d, early, syscall.SIGINT)
			if err == nil {
				// A perf.data whose count perf report cannot give (it
				// happened once, 10 min at 100 Hz) costs its sample row,
				// not the CPU and RSS figures of both recorders.
				if _, n, perr := perfSamples(perf, out); perr != nil {
					fmt.Fprintf(cfg.logger, "  perf -F %s: counting its samples: %v\n", hz, perr)
				} else {
					pr.samples = float64(n)
				}
			}
			os.Remove(out)
			if err != nil {
				return nil, fmt.Errorf("perf record -a -g -F %s: %w", hz, err)
			}
			peer = "perf record -a -g -F " + hz
		}
		fmt.Fprintf(cfg.logger, "  %s Hz: agent %.0f ms CPU (%.0f after %v) in %.1f min, peak %.1f MiB, RSS %.1f -> %.1f MiB, %.0f samples (%d received); perf %.0f ms (%.0f), peak %.1f MiB, RSS %.1f -> %.1f MiB, %.0f samples\n",
			hz, agent.cpuMs, agent.steadyMs, early, agent.minutes, agent.peakMiB, agent.earlyMiB, agent.late, agent.samples, agentGot, pr.cpuMs, pr.steadyMs, pr.peakMiB, pr.earlyMiB, pr.late, pr.samples)
		steady := (d - early).Minutes()
		metric := func(m string, a, p float64, note string) row {
			r := row{Scenario: "agent", Metric: m + " at " + hz + " Hz", Rawstack: a, Better: "lower", Note: note}
			if peer != "" {
				r.Peer, r.PeerVal = peer, p
			}
			return r
		}
		// The peer's rows: the agent against the OpenTelemetry eBPF
		// profiler on the same load.
		otel := func(m string, a, p float64, note string) row {
			r := row{Scenario: "agent", Metric: m + " at " + hz + " Hz, vs the OTel eBPF profiler", Rawstack: a, Better: "lower", Note: note}
			if orNote != "" {
				r.Note = orNote
			} else {
				r.Peer, r.PeerVal = "ebpf-profiler -samples-per-second "+hz, p
			}
			return r
		}
		rows = append(rows,
			otel("CPU (ms per minute, start-up and exit included)", agent.cpuMs/agent.minutes, or.cpuMs/or.minutes, "target: <= 0.3x the peer's"),
			otel(fmt.Sprintf("CPU after %v (ms per minute)", early), agent.steadyMs/steady, or.steadyMs/steady, "target: <= 0.5x the peer's"),
			otel("peak RSS, all its processes (MiB)", agent.peakMiB, or.peakMiB, "target: <= 0.5x the peer's"),
			otel(fmt.Sprintf("RSS growth after %v (MiB)", early), agent.late-agent.earlyMiB, or.late-or.earlyMiB, "target: ~0 (flat)"),
		)
		got := otel("samples received by its endpoint", float64(agentGot), float64(orGot), "")
		got.Better = "higher"
		rows = append(rows, got)
		rows = append(rows,
			metric("CPU (ms per minute, start-up and exit included)", agent.cpuMs/agent.minutes, pr.cpuMs/pr.minutes, ""),
			metric(fmt.Sprintf("CPU after %v (ms per minute)", early), agent.steadyMs/steady, pr.steadyMs/steady, ""),
			metric("peak RSS (MiB)", agent.peakMiB, pr.peakMiB, ""),
			metric(fmt.Sprintf("RSS growth after %v (MiB)", early), agent.late-agent.earlyMiB, pr.late-pr.earlyMiB, "target: ~0 (flat)"),
			row{Scenario: "agent", Metric: "samples at " + hz + " Hz", Rawstack: agent.samples, Peer: peer, PeerVal: pr.samples, Better: "higher"},
			row{Scenario: "agent", Metric: "floor: CPU (ms per minute, start-up and exit included) of a Go process that only wakes once a second, beside the " + hz + " Hz agent",
				Rawstack: fl.cpuMs / fl.minutes, Better: "lower", Note: "benchmarks/testdata/wakefloor, GOMAXPROCS=1, as the agent"},
			row{Scenario: "agent", Metric: fmt.Sprintf("floor: CPU after %v (ms per minute), the same process", early),
				Rawstack: fl.steadyMs / steady, Better: "lower", Note: "perf's CPU after its first minute is below it"},
		)
	}
	min := time.Since(start).Minutes()
	rows = append(rows, row{Scenario: "agent", Metric: "churn: short-lived processes per second", Rawstack: float64(spawned.Load()) / (min * 60),
		Note: fmt.Sprintf("%v per recorder, whole host; the machine is shared with other jobs", d)})
	return rows, nil
}

// agentBuilds builds the agent scenarios' rawstack (with rawstack-ebpf
// beside it) and their CPU-bound load, twothreads.c.
func agentBuilds(cfg *config) (rawstack, twothreads string, err error) {
	if rawstack, err = buildCompanions(cfg, "rawstack-ebpf"); err != nil {
		return "", "", err
	}
	twothreads, err = buildC(cfg, "twothreads.c", "-O2", "-fno-omit-frame-pointer", "-pthread")
	return rawstack, twothreads, err
}

// runFor runs a whole-host recorder for d, then stops it with sig and
// measures it: its tree's CPU (wait4 counts the reaped descendants), its
// tree's peak RSS, and its tree's RSS after early and at the end.
func runFor(cmd *exec.Cmd, d, early time.Duration, sig syscall.Signal) (agentRun, error) {
	var r agentRun
	var cpuEarly float64
	var stderr limitedBuf
	cmd.Stderr, cmd.Stdout = &stderr, &stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	rss := watchRSS(cmd.Process.Pid, "")
	time.Sleep(early)
	r.earlyMiB, cpuEarly = treeRSS(cmd.Process.Pid), treeCPU(cmd.Process.Pid)
	time.Sleep(d - early)
	r.late, r.steadyMs = treeRSS(cmd.Process.Pid), treeCPU(cmd.Process.Pid)-cpuEarly
	r.peakMiB = float64(rss.peakKiB()) / 1024
	cmd.Process.Signal(sig)
	if err := cmd.Wait(); err != nil {
		// perf record re-raises the SIGINT it handled, to exit by it.
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != sig {
			return r, fmt.Errorf("%s: %v: %s", cmd.Path, err, stderr.b)
		}
	}
	r.minutes = time.Since(t0).Minutes()
	st := cmd.ProcessState
	r.cpuMs = float64((st.UserTime() + st.SystemTime()).Milliseconds())
	if m := reAgentTaken.FindSubmatch(stderr.b); m != nil {
		r.samples, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	return r, nil
}

// treeCPU sums the CPU time (user and system, reaped children included)
// of pid's process tree, in ms.
func treeCPU(pid int) float64 {
	var ticks int64
	for _, p := range processTree(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
			if i < len(f) {
				n, _ := strconv.ParseInt(f[i], 10, 64)
				ticks += n
			}
		}
	}
	return float64(ticks) * 1000 / 100 // USER_HZ
}

// treeRSS sums VmRSS over pid's process tree, in MiB.
func treeRSS(pid int) float64 {
	var kb int64
	for _, p := range processTree(pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for _, ln := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(ln, "VmRSS:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				kb += n
			}
		}
	}
	return float64(kb) / 1024
}
