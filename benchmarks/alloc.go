package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rawstack/rawstack/platform/linux/allocshim"
)

// The alloc scenario (issue 26): the slowdown of an allocation-heavy
// program (testdata/allocload.c: malloc, memset, free, about 2 MiB
// live) under `rawstack record --alloc -- CMD` at the default rate,
// which preloads the allocation sampler, against heaptrack (LD_PRELOAD
// interposition of malloc and free, every call recorded), with both
// back ends (--alloc's default, eBPF, and --backend perf). The program's
// time runs from its first function (.preinit_array, before the
// constructors of what each recorder preloads) to the end of its loop,
// so that its process start counts but not the recorders' own start-up;
// the whole command's wall time, which counts that too, is a second row. Rounds
// interleave the unprofiled run and both recorders (A B C, C B A, ...);
// each figure is the median over the rounds of the round's ratio.
//
// A running process gets the sampler by injection: allocattach.go.
//
// And the recorder's memory with 10^5 and 10^6 live sampled allocations
// (testdata/allochold.c recorded with --alloc-rate 1, so every block is
// sampled): the peak RSS of rawstack and rawstack-ebpf, not the
// program's, which should not grow with the live blocks (the sampler in
// the program holds them, not the recorder).
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
	// record --alloc runs the rawstack-ebpf companion, looked for next
	// to rawstack.
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
	const rounds = 11
	n := 10_000_000
	if cfg.short {
		n = 2_000_000
	}
	// times runs cmd and returns the numbers the workload printed (the
	// loop's ns, the ns since its start, its CPU ns) and the wall time of
	// the whole command in ns.
	times := func(cmd *exec.Cmd) ([]float64, float64, error) {
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		t0 := time.Now()
		if err := cmd.Run(); err != nil {
			return nil, 0, fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, errb.String())
		}
		wall := float64(time.Since(t0).Nanoseconds())
		// The last line of numbers only (heaptrack prints its own
		// lines around the program's).
		lines := strings.Split(out.String(), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			var v []float64
			for _, f := range strings.Fields(lines[i]) {
				x, err := strconv.ParseFloat(f, 64)
				if err != nil {
					v = nil
					break
				}
				v = append(v, x)
			}
			if len(v) > 0 {
				return v, wall, nil
			}
		}
		return nil, 0, fmt.Errorf("%s printed no times: %q", strings.Join(cmd.Args, " "), out.String())
	}
	// The sampler alone, preloaded without a recorder (its markers are
	// then not probed): the floor of the preloaded path's cost.
	shim, err := allocshim.Install(cfg.work)
	if err != nil {
		return nil, err
	}
	type round struct {
		base, raw, perf, ht, shim       float64 // wall ns from the process's start
		baseCPU, rawCPU, htCPU, shimCPU float64 // its CPU time
		perfCPU                         float64
		baseWall, rawWall, htWall       float64 // the whole command's
		baseLoop                        float64
	}
	var rs []round
	trace := filepath.Join(cfg.work, "alloc.rawstack")
	ns := strconv.Itoa(n)
	for r := 0; r < rounds; r++ {
		var c round
		sides := []func() error{
			func() error {
				v, w, err := times(exec.Command(load, "run", ns))
				if err == nil && len(v) == 3 {
					c.base, c.baseCPU, c.baseWall, c.baseLoop = v[1], v[2], w, v[0]
				}
				return err
			},
			func() error {
				v, w, err := times(exec.Command(rawstack, "record", "-q", "--alloc", "-o", trace, "--", load, "run", ns))
				if err == nil && len(v) == 3 {
					c.raw, c.rawCPU, c.rawWall = v[1], v[2], w
				}
				return err
			},
			func() error {
				v, _, err := times(exec.Command(rawstack, "record", "-q", "--backend", "perf", "--alloc", "-o", trace, "--", load, "run", ns))
				if err == nil && len(v) == 3 {
					c.perf, c.perfCPU = v[1], v[2]
				}
				return err
			},
		}
		sides = append(sides, func() error {
			cmd := exec.Command(load, "run", ns)
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+shim)
			v, _, err := times(cmd)
			if err == nil && len(v) == 3 {
				c.shim, c.shimCPU = v[1], v[2]
			}
			return err
		})
		if htErr == nil {
			sides = append(sides, func() error {
				v, w, err := times(exec.Command(heaptrack, "-o", filepath.Join(cfg.work, "alloc.heaptrack"), load, "run", ns))
				if err == nil && len(v) == 3 {
					c.ht, c.htCPU, c.htWall = v[1], v[2], w
				}
				return err
			})
		}
		if err := inTurn(r, sides...); err != nil {
			return nil, err
		}
		if c.base == 0 || c.raw == 0 {
			return nil, fmt.Errorf("allocload run printed no time since its start")
		}
		rs = append(rs, c)
	}
	rows := []row{
		{Scenario: "alloc", Metric: "workload s (process start to end of loop), unprofiled", Rawstack: medianBy(rs, func(c round) float64 { return c.base }) / 1e9},
	}
	preload := medianBy(rs, func(c round) float64 { return c.raw / c.base })
	preloadWall := medianBy(rs, func(c round) float64 { return c.rawWall / c.baseWall })
	if htErr != nil {
		rows = append(rows,
			row{Scenario: "alloc", Metric: "target slowdown, record --alloc -- CMD (preloaded sampler, default rate)", Rawstack: preload, Better: "lower", Note: "heaptrack not installed; goal <= 1.1"},
			row{Scenario: "alloc", Metric: "whole-command slowdown (recorder start-up included)", Rawstack: preloadWall, Better: "lower", Note: "heaptrack not installed"})
	} else {
		rows = append(rows,
			row{Scenario: "alloc", Metric: "target slowdown, record --alloc -- CMD (preloaded sampler, default rate)", Rawstack: preload, Peer: "heaptrack", PeerVal: medianBy(rs, func(c round) float64 { return c.ht / c.base }), Better: "lower", Note: "goal <= 1.1 and below heaptrack's"},
			row{Scenario: "alloc", Metric: "whole-command slowdown (recorder start-up included)", Rawstack: preloadWall, Peer: "heaptrack", PeerVal: medianBy(rs, func(c round) float64 { return c.htWall / c.baseWall }), Better: "lower"})
	}
	cpuRow := row{Scenario: "alloc", Metric: "target CPU time ratio, record --alloc -- CMD", Rawstack: medianBy(rs, func(c round) float64 { return c.rawCPU / c.baseCPU }), Better: "lower", Note: "less sensitive to other load than wall time"}
	perfRow := row{Scenario: "alloc", Metric: "target slowdown, record --backend perf --alloc -- CMD (preloaded sampler)", Rawstack: medianBy(rs, func(c round) float64 { return c.perf / c.base }), Better: "lower", Note: "goal <= 1.1"}
	perfCPURow := row{Scenario: "alloc", Metric: "target CPU time ratio, record --backend perf --alloc -- CMD", Rawstack: medianBy(rs, func(c round) float64 { return c.perfCPU / c.baseCPU }), Better: "lower"}
	if htErr == nil {
		cpuRow.Peer, cpuRow.PeerVal = "heaptrack", medianBy(rs, func(c round) float64 { return c.htCPU / c.baseCPU })
		perfRow.Peer, perfRow.PeerVal = "heaptrack", medianBy(rs, func(c round) float64 { return c.ht / c.base })
		perfCPURow.Peer, perfCPURow.PeerVal = cpuRow.Peer, cpuRow.PeerVal
	}
	rows = append(rows, cpuRow, perfRow, perfCPURow,
		row{Scenario: "alloc", Metric: "target slowdown, the sampler preloaded without a recorder", Rawstack: medianBy(rs, func(c round) float64 { return c.shim / c.base }), Better: "lower", Note: "the preloaded path's floor"},
		row{Scenario: "alloc", Metric: "target CPU time ratio, the sampler preloaded without a recorder", Rawstack: medianBy(rs, func(c round) float64 { return c.shimCPU / c.baseCPU }), Better: "lower"})
	htPath := heaptrack
	if htErr != nil {
		htPath = ""
	}
	attachN := rounds
	if cfg.short {
		attachN = 3
	}
	attached, err := attachRounds(cfg, rawstack, htPath, attachN)
	if err != nil {
		return nil, err
	}
	rows = append(rows, attached...)
	hold, err := buildC(cfg, "allochold.c", "-O2", "-g")
	if err != nil {
		return nil, err
	}
	for _, live := range []string{"100000", "1000000"} {
		var peaks []float64
		for r := 0; r < 3; r++ {
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
