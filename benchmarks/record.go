package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
)

// The record scenario (issue 3): a CPU-bound C++ workload run unsampled,
// under `rawstack record -F 1000` and under `perf record -F 1000 -g`,
// interleaved, several times. It reports the workload's slowdown (its own
// CPU time, which includes the sampling interrupts charged to it) and the
// trace bytes per sample of each recorder.
func init() {
	register(&scenario{name: "record", order: 30, run: runRecord})
}

var (
	reCPU     = regexp.MustCompile(`cpu_ns (\d+)`)
	reSamples = regexp.MustCompile(`(\d+) samples`)
	rePerfSmp = regexp.MustCompile(`SAMPLE events:\s+(\d+)`)
)

type recordRun struct {
	cpuNs   float64 // the workload's own CPU time
	allNs   float64 // CPU time of the command run, its reaped children included
	bytes   int64
	samples int64
}

// recorderNsPerSample is the recorder's own CPU time per sample: all CPU
// time of the run minus the workload's.
func (r recordRun) recorderNsPerSample() float64 {
	return (r.allNs - r.cpuNs) / float64(max(r.samples, 1))
}

func runRecord(cfg *config) ([]row, error) {
	load, err := buildC(cfg, "recordload.cc", "-O2", "-fno-omit-frame-pointer")
	if err != nil {
		return nil, err
	}
	rawstack, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	rounds, reps := "150", 11
	if cfg.short {
		rounds, reps = "40", 3
	}
	perf, perfErr := exec.LookPath("perf")
	if perfErr != nil {
		if err := needPeer("perf not installed"); err != nil {
			return nil, err
		}
	}

	var base, rs, pf []recordRun
	for i := 0; i < reps; i++ {
		unsampled := func() error {
			r, err := runLoad(exec.Command(load, rounds))
			if err != nil {
				return fmt.Errorf("unsampled: %w", err)
			}
			base = append(base, r)
			return nil
		}
		withRawstack := func() error {
			out := filepath.Join(cfg.work, "trace.rawstack")
			r, err := runLoad(exec.Command(rawstack, "record", "-q", "-F", "1000", "--unwind", "fp", "-o", out, "--", load, rounds))
			if err != nil {
				return fmt.Errorf("rawstack record: %w", err)
			}
			r.bytes, r.samples, err = countSamples(out)
			if err != nil {
				return err
			}
			rs = append(rs, r)
			return nil
		}
		withPerf := func() error {
			if perfErr != nil {
				return nil
			}
			pdata := filepath.Join(cfg.work, "perf.data")
			r, err := runLoad(exec.Command(perf, "record", "-q", "-F", "1000", "-g", "-o", pdata, "--", load, rounds))
			if err == nil {
				r.bytes, r.samples, err = perfSamples(perf, pdata)
			}
			if err != nil {
				// perf is there but fails: a broken peer is an error.
				return fmt.Errorf("perf record: %w", err)
			}
			pf = append(pf, r)
			return nil
		}
		if err := inTurn(i, unsampled, withRawstack, withPerf); err != nil {
			return nil, err
		}
	}
	b := medianBy(base, func(r recordRun) float64 { return r.cpuNs })
	rsCPU := medianBy(rs, func(r recordRun) float64 { return r.cpuNs })
	rsBPS := medianBy(rs, func(r recordRun) float64 { return float64(r.bytes) / float64(max(r.samples, 1)) })
	rsN := medianBy(rs, func(r recordRun) float64 { return float64(r.samples) })
	fmt.Fprintf(cfg.logger, "  unsampled %.0f ms CPU, rawstack %.0f ms (%.0f samples)\n", b/1e6, rsCPU/1e6, rsN)
	rows := []row{
		{Scenario: "record", Metric: "workload CPU time, unsampled (ms)", Rawstack: b / 1e6, Better: "lower"},
	}
	if perfErr != nil {
		note := "perf not installed"
		return append(rows,
			row{Scenario: "record", Metric: "slowdown at 1000 Hz (x)", Rawstack: rsCPU / b, Better: "lower", Note: note},
			row{Scenario: "record", Metric: "trace bytes/sample", Rawstack: rsBPS, Better: "lower", Note: note},
		), nil
	}
	pfCPU := medianBy(pf, func(r recordRun) float64 { return r.cpuNs })
	pfBPS := medianBy(pf, func(r recordRun) float64 { return float64(r.bytes) / float64(max(r.samples, 1)) })
	pfN := medianBy(pf, func(r recordRun) float64 { return float64(r.samples) })
	return append(rows,
		row{Scenario: "record", Metric: "slowdown at 1000 Hz (x)", Rawstack: rsCPU / b, Peer: "perf record -g", PeerVal: pfCPU / b, Better: "lower", Note: "target: no worse than perf"},
		row{Scenario: "record", Metric: "trace bytes/sample", Rawstack: rsBPS, Peer: "perf.data", PeerVal: pfBPS, Better: "lower", Note: "target: <= 1/5 of perf.data"},
		row{Scenario: "record", Metric: "samples recorded", Rawstack: rsN, Peer: "perf record -g", PeerVal: pfN, Better: "higher"},
		row{Scenario: "record", Metric: "recorder CPU/sample (us)", Rawstack: medianBy(rs, recordRun.recorderNsPerSample) / 1e3,
			Peer: "perf record -g", PeerVal: medianBy(pf, recordRun.recorderNsPerSample) / 1e3, Better: "lower",
			Note: "whole recorder process incl. startup and exit"},
	), nil
}

// runLoad runs cmd and reads the workload's cpu_ns from its stderr.
func runLoad(cmd *exec.Cmd) (recordRun, error) {
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return recordRun{}, fmt.Errorf("%v: %s", err, stderr.String())
	}
	m := reCPU.FindSubmatch(stderr.Bytes())
	if m == nil {
		return recordRun{}, fmt.Errorf("no cpu_ns in output: %s", stderr.String())
	}
	ns, _ := strconv.ParseFloat(string(m[1]), 64)
	st := cmd.ProcessState
	all := float64((st.UserTime() + st.SystemTime()).Nanoseconds())
	return recordRun{cpuNs: ns, allNs: all}, nil
}

// perfSamples returns the size of a perf.data file and its sample count.
func perfSamples(perf, path string) (int64, int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	out, err := exec.Command(perf, "report", "-i", path, "--stats").Output()
	if err != nil {
		return 0, 0, fmt.Errorf("perf report --stats: %w", err)
	}
	m := rePerfSmp.FindSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("perf report --stats: no sample count")
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return fi.Size(), n, nil
}
