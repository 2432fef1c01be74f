package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// The startup scenario (issue 14) times "rawstack --help", the floor under
// every short command, against a Go program that does nothing, built the
// same way (CGO_ENABLED=0): runs alternate A B A B and the row gives the
// median of each and the median of the per-pair ratios. Target: ≤ 3 ms on
// an idle machine. GODEBUG=inittrace=1 (and TestStartupInitCost in
// cmd/rawstack) says which package's init costs what.
func init() {
	register(&scenario{name: "startup", order: 140, run: runStartup})
}

func runStartup(cfg *config) ([]row, error) {
	cli, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.work, "trivial")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module trivial\n\ngo 1.22\n"), 0o644); err != nil {
		return nil, err
	}
	triv := filepath.Join(dir, "trivial")
	build := exec.Command("go", "build", "-o", triv, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build trivial: %v\n%s", err, out)
	}
	pairs := 31
	if cfg.short {
		pairs = 11
	}
	timeRun := func(args ...string) (float64, error) {
		start := time.Now()
		err := exec.Command(args[0], args[1:]...).Run()
		return ms(time.Since(start)), err
	}
	var raw, base, ratio []float64
	for i := 0; i < pairs; i++ {
		a, err := timeRun(cli, "--help")
		if err != nil {
			return nil, fmt.Errorf("rawstack --help: %w", err)
		}
		b, err := timeRun(triv)
		if err != nil {
			return nil, err
		}
		raw, base, ratio = append(raw, a), append(base, b), append(ratio, a/b)
	}
	return []row{
		{Scenario: "startup", Metric: "ms rawstack --help, process start to exit", Rawstack: medianOf(raw), Peer: "empty Go program", PeerVal: medianOf(base), Better: "lower",
			Note: fmt.Sprintf("target ≤ 3 ms; median ratio of %d alternating pairs %.2f", pairs, medianOf(ratio))},
	}, nil
}
