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
// with each back end, or (out of process) under rawstack record. Each
// round runs every variant once, in alternating order; a variant's figure
// is the median over rounds of its throughput over the unprofiled run's of
// the same round.
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
	type variant struct {
		name string
		args []string
		goal float64 // 0: no goal
	}
	vs := []variant{
		{"none", nil, 0},
		{"runtime/pprof, 100 Hz", []string{"-profiler", "pprof", "-hz", "100"}, 0},
		{"tracer embedded, perf, 100 Hz", []string{"-profiler", "tracer", "-hz", "100", "-trace", trace}, 0.97},
		{"tracer embedded, perf, 999 Hz", []string{"-profiler", "tracer", "-hz", "999", "-trace", trace}, 0.94},
		{"tracer embedded, eBPF, 100 Hz", []string{"-profiler", "tracer", "-backend", "ebpf", "-hz", "100", "-trace", trace}, 0.97},
		{"tracer embedded, eBPF, 999 Hz", []string{"-profiler", "tracer", "-backend", "ebpf", "-hz", "999", "-trace", trace}, 0.94},
		{"rawstack record -F 100 (out of process)", nil, 0},
	}
	if os.Geteuid() != 0 {
		if err := needPeer("the eBPF back end needs root"); err != nil {
			return nil, err
		}
		vs = append(vs[:4], vs[6])
	}
	run := func(v variant) (float64, error) {
		args := append([]string{"-d", dur}, v.args...)
		cmd := exec.Command(svc, args...)
		if strings.HasPrefix(v.name, "rawstack record") {
			cmd = exec.Command(rawstack, append([]string{"record", "-q", "-F", "100", "-o", trace, "--", svc}, args...)...)
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
	ratios := make([][]float64, len(vs))
	abs := make([][]float64, len(vs))
	for r := 0; r < rounds; r++ {
		got := make([]float64, len(vs))
		sides := make([]func() error, len(vs))
		for i, v := range vs {
			sides[i] = func() error {
				rps, err := run(v)
				got[i] = rps
				return err
			}
		}
		if err := inTurn(r, sides...); err != nil {
			return nil, err
		}
		for i := range vs {
			ratios[i] = append(ratios[i], got[i]/got[0])
			abs[i] = append(abs[i], got[i])
		}
		fmt.Fprintf(cfg.logger, "  embed round %d: %.0f req/s unprofiled; ratios %v\n", r, got[0], fmtRatios(got))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	la := strings.Join(strings.Fields(string(load))[:3], " ")
	var rows []row
	for i, v := range vs {
		rw := row{Scenario: "embed", Metric: "requests/s, " + v.name, Rawstack: median(abs[i])}
		if i > 0 {
			rw = row{Scenario: "embed", Metric: "throughput share of unprofiled, " + v.name, Rawstack: median(ratios[i]), Better: "higher",
				Note: fmt.Sprintf("median of %d rounds' ratios; load %s", rounds, la)}
			if v.goal > 0 {
				rw.Note += fmt.Sprintf("; goal >= %.2f", v.goal)
			}
		}
		rows = append(rows, rw)
	}
	return rows, nil
}

func fmtRatios(got []float64) string {
	var s []string
	for _, g := range got[1:] {
		s = append(s, fmt.Sprintf("%.3f", g/got[0]))
	}
	return strings.Join(s, " ")
}
