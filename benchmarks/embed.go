package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The embed scenario (issue 32): what embedding the tracer costs a Go
// service, against what runtime/pprof costs it. benchmarks/testdata/embedsvc
// serves HTTP on loopback (JSON decode, SHA-256, JSON encode) to 4 client
// goroutines of its own process on GOMAXPROCS = the machine's cores, and
// prints the requests it served per second over a measured interval, with
// no profiler, runtime/pprof's CPU profile, the tracer at 100 and 999 Hz
// with each back end, or (out of process) under rawstack record and
// perf record. A round runs every variant once, in alternating order,
// with an unprofiled run before each and one after the last: a variant's
// ratio in a round is its throughput over the mean of the two unprofiled
// runs beside it (the machine's other load drifts over a round's half
// minute), and its figure is the median of its rounds' ratios.
func init() {
	register(&scenario{name: "embed", order: 170, run: runEmbed})
}

func runEmbed(cfg *config) ([]row, error) {
	rawstack, err := buildCompanions(cfg, "rawstack-ebpf")
	if err != nil {
		return nil, err
	}
	svc := filepath.Join(cfg.work, "embedsvc")
	b := exec.Command("go", "build", "-o", svc, "github.com/rawstack/rawstack/benchmarks/testdata/embedsvc")
	if out, err := b.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build embedsvc: %v\n%s", err, out)
	}
	dur, rounds := "2s", 11
	if cfg.short {
		dur, rounds = "1s", 3
	}
	trace := filepath.Join(cfg.work, "embed.rawstack")
	perfData := filepath.Join(cfg.work, "embed.perf.data")
	type variant struct {
		name string
		args []string // embedsvc's flags, or with wrap the recorder's argv
		wrap bool     // args run the service: its flags follow them
		goal float64  // 0: no goal
	}
	vs := []variant{
		{name: "runtime/pprof, 100 Hz", args: []string{"-profiler", "pprof", "-hz", "100"}},
		{name: "tracer embedded, perf, 100 Hz", args: []string{"-profiler", "tracer", "-hz", "100", "-trace", trace}, goal: 0.97},
		{name: "tracer embedded, perf, 999 Hz", args: []string{"-profiler", "tracer", "-hz", "999", "-trace", trace}, goal: 0.94},
		{name: "tracer embedded, eBPF, 100 Hz", args: []string{"-profiler", "tracer", "-backend", "ebpf", "-hz", "100", "-trace", trace}, goal: 0.97},
		{name: "tracer embedded, eBPF, 999 Hz", args: []string{"-profiler", "tracer", "-backend", "ebpf", "-hz", "999", "-trace", trace}, goal: 0.94},
		{name: "rawstack record -F 100 (out of process)", args: []string{rawstack, "record", "-q", "-F", "100", "-o", trace, "--", svc}, wrap: true},
		{name: "rawstack record -F 999 (out of process)", args: []string{rawstack, "record", "-q", "-F", "999", "-o", trace, "--", svc}, wrap: true},
	}
	if os.Geteuid() != 0 {
		if err := needPeer("the eBPF back end needs root"); err != nil {
			return nil, err
		}
		vs = append(vs[:3], vs[5:]...)
	}
	// perf record -g at 999 Hz samples the service as the perf back end
	// does (an event per thread, the kernel's frame-pointer walk): the
	// peer for what that sampling costs from outside the process.
	if perf, err := exec.LookPath("perf"); err == nil {
		vs = append(vs, variant{name: "perf record -F 999 -g (out of process)", args: []string{perf, "record", "-q", "-F", "999", "-g", "-o", perfData, "--", svc}, wrap: true})
	} else if err := needPeer("perf not installed"); err != nil {
		return nil, err
	}
	run := func(v variant) (float64, error) {
		args := []string{"-d", dur}
		cmd := exec.Command(svc, append(args, v.args...)...)
		if v.wrap {
			cmd = exec.Command(v.args[0], append(v.args[1:], args...)...)
		}
		out, err := cmd.Output()
		if err != nil {
			return 0, fmt.Errorf("%s: %v", v.name, err)
		}
		lines := strings.Fields(string(out))
		if len(lines) == 0 {
			return 0, fmt.Errorf("%s: no output", v.name)
		}
		return strconv.ParseFloat(lines[len(lines)-1], 64)
	}
	none := variant{name: "none"}
	ratios := make([][]float64, len(vs))
	abs := make([][]float64, len(vs))
	var unprofiled []float64
	for r := 0; r < rounds; r++ {
		got := make([]float64, len(vs))
		// The unprofiled runs, in the order they ran: base[k] before
		// the k-th variant run, base[len(vs)] after the last.
		var base []float64
		runNone := func() error {
			rps, err := run(none)
			base = append(base, rps)
			return err
		}
		order := make([]int, len(vs))
		for k := range order {
			order[k] = k
			if r%2 == 1 {
				order[k] = len(vs) - 1 - k
			}
		}
		for _, i := range order {
			if err := runNone(); err != nil {
				return nil, err
			}
			rps, err := run(vs[i])
			if err != nil {
				return nil, err
			}
			got[i] = rps
		}
		if err := runNone(); err != nil {
			return nil, err
		}
		for k, i := range order {
			beside := (base[k] + base[k+1]) / 2
			ratios[i] = append(ratios[i], got[i]/beside)
			abs[i] = append(abs[i], got[i])
		}
		mean := 0.0
		for _, b := range base {
			mean += b / float64(len(base))
		}
		unprofiled = append(unprofiled, mean)
		var rs []string
		for i := range vs {
			rs = append(rs, fmt.Sprintf("%.3f", ratios[i][r]))
		}
		fmt.Fprintf(cfg.logger, "  embed round %d: %.0f req/s unprofiled (mean); ratios %s\n", r, mean, strings.Join(rs, " "))
	}
	la := loadAvg()
	rows := []row{{Scenario: "embed", Metric: "requests/s, none", Rawstack: median(unprofiled)}}
	for i, v := range vs {
		rw := row{Scenario: "embed", Metric: "throughput share of unprofiled, " + v.name, Rawstack: median(ratios[i]), Better: "higher",
			Note: fmt.Sprintf("median of %d rounds' ratios to the unprofiled runs beside it (%.0f req/s median); load %s", rounds, median(abs[i]), la)}
		if v.goal > 0 {
			rw.Note += fmt.Sprintf("; goal >= %.2f", v.goal)
		}
		rows = append(rows, rw)
	}
	return rows, nil
}
