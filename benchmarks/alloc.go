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

// The alloc scenario (issue 26): the slowdown of an allocation-heavy
// program (testdata/allocload.c: malloc, memset, free, about 2 MiB
// live) under `rawstack record --alloc` at the default rate, against
// heaptrack (LD_PRELOAD interposition of malloc and free, every call
// recorded). The figure is the program's own time for its loop, so that
// neither recorder's start-up counts; rounds interleave the unprofiled
// run and both recorders.
//
// And the recorder's memory with 10^5 and 10^6 live sampled allocations
// (testdata/allochold.c recorded with --alloc-rate 1, so every block is
// sampled): the peak RSS of rawstack and rawstack-ebpf, not the
// program's, which should not grow with the live blocks (the BPF map
// holds them, not the recorder).
func init() {
	register(&scenario{name: "alloc", order: 260, run: runAlloc})
}

func runAlloc(cfg *config) ([]row, error) {
	if os.Geteuid() != 0 {
		return absent("alloc", "skipped", "needs root (CAP_BPF, CAP_PERFMON) for uprobes")
	}
	load, err := buildC(cfg, "allocload.c", "-O2", "-g")
	if err != nil {
		return nil, err
	}
	// record --backend ebpf runs the rawstack-ebpf companion, looked for
	// next to rawstack.
	rawstack, err := buildCompanions(cfg, "rawstack-ebpf")
	if err != nil {
		return nil, err
	}
	heaptrack, htErr := exec.LookPath("heaptrack")
	if htErr != nil {
		if err := needPeer("heaptrack not installed"); err != nil {
			return nil, err
		}
	}
	n, reps := "1000000", 5
	if cfg.short {
		n, reps = "200000", 3
	}
	// loopNs runs cmd and returns the loop time the workload printed last.
	loopNs := func(cmd *exec.Cmd) (float64, error) {
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, errb.String())
		}
		lines := strings.Fields(out.String())
		for i := len(lines) - 1; i >= 0; i-- {
			if v, err := strconv.ParseFloat(lines[i], 64); err == nil {
				return v, nil
			}
		}
		return 0, fmt.Errorf("%s printed no loop time: %q", strings.Join(cmd.Args, " "), out.String())
	}
	var base, raw, ht []float64
	for r := 0; r < reps; r++ {
		trace := filepath.Join(cfg.work, "alloc.rawstack")
		sides := []func() error{
			func() error {
				v, err := loopNs(exec.Command(load, n))
				base = append(base, v)
				return err
			},
			func() error {
				v, err := loopNs(exec.Command(rawstack, "record", "-q", "--alloc", "-o", trace, "--", load, n))
				raw = append(raw, v)
				return err
			},
		}
		if htErr == nil {
			sides = append(sides, func() error {
				v, err := loopNs(exec.Command(heaptrack, "-o", filepath.Join(cfg.work, "alloc.heaptrack"), load, n))
				ht = append(ht, v)
				return err
			})
		}
		if err := inTurn(r, sides...); err != nil {
			return nil, err
		}
	}
	b := median(base)
	rows := []row{
		{Scenario: "alloc", Metric: "workload loop s, unprofiled", Rawstack: b / 1e9},
		{Scenario: "alloc", Metric: "slowdown under record --alloc (default rate)", Rawstack: median(raw) / b, Better: "lower", Note: "goal <= 1.1 and below heaptrack's"},
	}
	if htErr != nil {
		rows = append(rows, row{Scenario: "alloc", Metric: "slowdown vs heaptrack", Note: "heaptrack not installed"})
	} else {
		rows = append(rows, row{Scenario: "alloc", Metric: "slowdown vs heaptrack", Rawstack: median(raw) / b, Peer: "heaptrack", PeerVal: median(ht) / b, Better: "lower"})
	}
	hold, err := buildC(cfg, "allochold.c", "-O2", "-g")
	if err != nil {
		return nil, err
	}
	for _, live := range []string{"100000", "1000000"} {
		var peaks []float64
		for r := 0; r < reps; r++ {
			cmd := exec.Command(rawstack, "record", "-q", "--alloc", "--alloc-rate", "1", "-o", filepath.Join(cfg.work, "hold.rawstack"), "--", hold, live)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				return nil, err
			}
			rss := watchRSS(cmd.Process.Pid, hold)
			err := cmd.Wait()
			peak := rss.peakKiB()
			if err != nil {
				return nil, fmt.Errorf("record --alloc %s %s: %v\n%s", hold, live, err, errb.String())
			}
			peaks = append(peaks, float64(peak)/1024)
		}
		rows = append(rows, row{Scenario: "alloc", Metric: "recorder peak RSS MiB, " + live + " live sampled blocks", Rawstack: median(peaks), Better: "lower"})
	}
	return rows, nil
}
