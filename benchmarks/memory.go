package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/rawstack/rawstack/format"
)

// The memory scenario (issue 14) records a program whose stacks rarely
// repeat (random recursion depth 1-200 through four functions) at 4 kHz
// for 60 s (10 s with -short) and reports the recorder's peak RSS: the
// stack intern table is capped (tracer: 1 Mi PCs, 256 Ki stacks), so the
// peak must not grow with the length of the recording.
func init() {
	register(&scenario{name: "memory", order: 142, run: runMemory})
}

func runMemory(cfg *config) ([]row, error) {
	bin, err := buildC(cfg, "randstack.c", "-O2", "-fno-omit-frame-pointer")
	if err != nil {
		return nil, err
	}
	cli, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	secs := "60"
	if cfg.short {
		secs = "10"
	}
	out := filepath.Join(cfg.work, "memory.rawstack")
	cmd := exec.Command(cli, "record", "-q", "-F", "4000", "-o", out, "--", bin, secs)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// The recorder's own peak (VmHWM), polled until it exits; not the
	// traced program's: ru_maxrss would report at least this benchmark
	// process's RSS, which it inherits, and RUSAGE_CHILDREN the largest
	// of the recorder and the program.
	rss := watchRSS(cmd.Process.Pid, bin)
	err = cmd.Wait()
	maxrssKB := rss.peakKiB()
	if err != nil {
		return nil, fmt.Errorf("rawstack record: %v: %s", err, stderr.String())
	}
	return memoryRows(maxrssKB, out, secs)
}

func memoryRows(maxrssKB int64, out, secs string) ([]row, error) {
	f, err := os.Open(out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := format.NewReader(f)
	if err != nil {
		return nil, err
	}
	var samples, stacks, pcs int
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch ev.Kind {
		case format.KindSample, format.KindRawStack:
			samples++
		case format.KindStack:
			stacks++
			pcs += len(ev.Stack.PCs)
		}
	}
	fi, _ := f.Stat()
	return []row{
		{Scenario: "memory", Metric: "recorder peak RSS (MiB), " + secs + " s at 4 kHz, stacks rarely repeat", Rawstack: float64(maxrssKB) / 1024, Better: "lower",
			// The recorder's own VmHWM; the traced program's is not counted.
			Note: fmt.Sprintf("%d samples, %d distinct stacks (%d PCs, %.0f MiB uncapped) in %.0f MiB of trace", samples, stacks, pcs, float64(pcs*8)/(1<<20), float64(fi.Size())/(1<<20))},
	}, nil
}
