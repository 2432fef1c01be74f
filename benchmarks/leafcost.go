package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// The leafcost scenario (issue 14) separates --unwind auto's per-sample
// host cost from its one-off costs: the unwind scenario's recorder CPU per
// sample is whole-process (start-up, and the unwind table of each module
// the samples pass through, built once). Here platform/linux/tracking's
// BenchmarkLeafRepair replays the same real samples of the shrink-wrapped
// program in fp mode and in auto mode (record decode, leaf repair, sample
// encode), tables built before the timer, alternating blocks of 256
// samples.
func init() {
	register(&scenario{name: "leafcost", order: 55, run: runLeafCost})
}

func runLeafCost(cfg *config) ([]row, error) {
	n := "20000x"
	if cfg.short {
		n = "4000x"
	}
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkLeafRepair$", "-benchtime", n, "./platform/linux/tracking")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go test -bench BenchmarkLeafRepair ./platform/linux: %v: %.300s", err, out)
	}
	// BenchmarkLeafRepair-2  N  T ns/op  A auto-ns/sample  R auto/fp  F fp-ns/sample ...
	m := map[string]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "BenchmarkLeafRepair") {
			if strings.Contains(line, "SKIP") || strings.HasPrefix(line, "---") {
				fmt.Fprintf(cfg.logger, "  %s\n", line)
			}
			continue
		}
		f := strings.Fields(line)
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				m[f[i+1]] = v
			}
		}
	}
	if m["auto-ns/sample"] == 0 {
		// The benchmark skips where perf_event or the fixture's compiler is
		// missing: a note here, an error under CI=true.
		return absent("leafcost", "ns/sample", fmt.Sprintf("no benchmark result (skipped?): %.300s", out))
	}
	return []row{
		{Scenario: "leafcost", Metric: "shrink-wrapped C: host ns/sample, --unwind auto (tables warm)", Rawstack: m["auto-ns/sample"], Peer: "--unwind fp", PeerVal: m["fp-ns/sample"], Better: "lower",
			Note: fmt.Sprintf("median of block ratios auto/fp %.2f; auto adds %.2f frames/sample; decode+repair+encode, go test -bench BenchmarkLeafRepair ./platform/linux/tracking", m["auto/fp"], m["frames-added/sample"])},
	}, nil
}
