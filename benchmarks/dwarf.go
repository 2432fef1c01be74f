package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rawstack/rawstack/format"
)

// The dwarf scenario (issue 5, benchmark 5b): the record workload built
// -O2 -fomit-frame-pointer, so that only DWARF unwinding recovers its
// stacks, recorded at 1000 Hz with an 8 KiB stack copy per sample by
//
//   - rawstack record --unwind dwarf (unwound online, compact stacks),
//   - rawstack record --unwind dwarf --keep-raw (unwound by the report),
//   - perf record --call-graph dwarf,8192 (unwound by perf report),
//
// interleaved, then reported by `rawstack report` and `perf report --stdio`.
// It compares trace bytes per sample and report wall time.
func init() {
	register(&scenario{name: "dwarf", order: 52, run: runDWARF})
}

type dwarfRun struct {
	recordWall, reportWall time.Duration
	bytes, samples         int64
	recorderNs             float64 // CPU time of the recorder: all of the run's minus the workload's
	chain                  float64 // fraction of samples whose stack holds main, deep<8>…deep<1> and leaf
}

// fullChain reports whether a stack's function names (any order, any
// decoration after the name) hold recordload's whole chain.
func fullChain(names []string) bool {
	var seen [4]bool
	for _, n := range names {
		n = strings.TrimSpace(n)
		switch {
		case n == "main":
			seen[0] = true
		case strings.HasPrefix(n, "deep<8>::run"):
			seen[1] = true
		case strings.HasPrefix(n, "deep<1>::run"):
			seen[2] = true
		case strings.HasPrefix(n, "leaf(") || n == "leaf":
			seen[3] = true
		}
	}
	return seen[0] && seen[1] && seen[2] && seen[3]
}

// rawstackChain converts a trace to folded stacks and returns the
// fraction of samples with the whole chain.
func rawstackChain(rawstack, trace string) (float64, error) {
	out, err := exec.Command(rawstack, "convert", trace, "--to", "folded", "--no-debuginfod").Output()
	if err != nil {
		return 0, fmt.Errorf("rawstack convert: %w", err)
	}
	var all, good int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		n, err := strconv.Atoi(line[sp+1:])
		if err != nil {
			continue
		}
		all += n
		if fullChain(strings.Split(line[:sp], ";")) {
			good += n
		}
	}
	return float64(good) / float64(max(all, 1)), nil
}

// perfChain reads perf script's stacks and returns the fraction of
// samples with the whole chain.
func perfChain(perf, pdata string) (float64, error) {
	out, err := exec.Command(perf, "script", "-i", pdata, "-F", "ip,sym").Output()
	if err != nil {
		return 0, fmt.Errorf("perf script: %w", err)
	}
	var all, good int
	for _, block := range strings.Split(string(out), "\n\n") {
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				names = append(names, strings.Join(f[1:], " "))
			}
		}
		if len(names) == 0 {
			continue
		}
		all++
		if fullChain(names) {
			good++
		}
	}
	return float64(good) / float64(max(all, 1)), nil
}

// recordTimed runs a recorder command via runLoad and fills r's record
// wall time and recorder CPU time.
func (r *dwarfRun) recordTimed(cmd *exec.Cmd) error {
	start := time.Now()
	lr, err := runLoad(cmd)
	r.recordWall = time.Since(start)
	r.recorderNs = lr.allNs - lr.cpuNs
	return err
}

func (r dwarfRun) bps() float64 { return float64(r.bytes) / float64(max(r.samples, 1)) }

func runDWARF(cfg *config) ([]row, error) {
	load, err := buildC(cfg, "recordload.cc", "-O2", "-g", "-fomit-frame-pointer")
	if err != nil {
		return nil, err
	}
	rawstack, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	rounds, reps := "300", 11
	if cfg.short {
		rounds, reps = "60", 3
	}
	perf, perfErr := exec.LookPath("perf")
	if perfErr != nil {
		if err := needPeer("perf not installed"); err != nil {
			return nil, err
		}
	}
	var online, raw, pf []dwarfRun
	withRawstack := func(keep bool) func() error {
		return func() error {
			out := filepath.Join(cfg.work, "dwarf.rawstack")
			args := []string{"record", "-q", "-F", "1000", "--unwind", "dwarf", "--stack-size", "8192", "-o", out}
			if keep {
				args = append(args, "--keep-raw")
			}
			var r dwarfRun
			var err error
			if err = r.recordTimed(exec.Command(rawstack, append(args, "--", load, rounds)...)); err != nil {
				return fmt.Errorf("rawstack record: %w", err)
			}
			if r.bytes, r.samples, err = countSamples(out); err != nil {
				return err
			}
			if r.reportWall, err = timed(exec.Command(rawstack, "report", "--no-debuginfod", out)); err != nil {
				return fmt.Errorf("rawstack report: %w", err)
			}
			if r.chain, err = rawstackChain(rawstack, out); err != nil {
				return err
			}
			if keep {
				raw = append(raw, r)
			} else {
				online = append(online, r)
			}
			return nil
		}
	}
	withPerf := func() error {
		if perfErr != nil {
			return nil
		}
		pdata := filepath.Join(cfg.work, "dwarf.perf.data")
		var r dwarfRun
		err := r.recordTimed(exec.Command(perf, "record", "-q", "-F", "1000", "--call-graph", "dwarf,8192", "-o", pdata, "--", load, rounds))
		if err == nil {
			r.bytes, r.samples, err = perfSamples(perf, pdata)
		}
		if err == nil {
			r.reportWall, err = timed(exec.Command(perf, "report", "-i", pdata, "--stdio"))
		}
		if err == nil {
			r.chain, err = perfChain(perf, pdata)
		}
		if err != nil {
			return fmt.Errorf("perf: %w", err)
		}
		pf = append(pf, r)
		return nil
	}
	for i := 0; i < reps; i++ {
		if err := inTurn(i, withRawstack(false), withRawstack(true), withPerf); err != nil {
			return nil, err
		}
	}
	med := func(rs []dwarfRun, f func(dwarfRun) float64) float64 {
		return medianBy(rs, f)
	}
	bps := func(r dwarfRun) float64 { return r.bps() }
	rep := func(r dwarfRun) float64 { return r.reportWall.Seconds() }
	total := func(r dwarfRun) float64 { return (r.recordWall + r.reportWall).Seconds() }
	n := func(r dwarfRun) float64 { return float64(r.samples) }
	cpu := func(r dwarfRun) float64 { return r.recorderNs / float64(max(r.samples, 1)) / 1e3 }
	chain := func(r dwarfRun) float64 { return 100 * r.chain }
	fmt.Fprintf(cfg.logger, "  online %.0f B/sample, keep-raw %.0f B/sample, %.0f samples\n", med(online, bps), med(raw, bps), med(online, n))
	peer, note := "perf --call-graph dwarf", ""
	if perfErr != nil {
		peer, note = "", "perf not installed"
	}
	pv := func(f func(dwarfRun) float64) float64 {
		if peer == "" {
			return 0
		}
		return med(pf, f)
	}
	or := func(target string) string {
		if note != "" {
			return note
		}
		return target
	}
	return []row{
		{Scenario: "dwarf", Metric: "trace bytes/sample, online unwinding", Rawstack: med(online, bps), Peer: peer, PeerVal: pv(bps), Better: "lower", Note: or("target: <= 1/50 of perf.data")},
		{Scenario: "dwarf", Metric: "trace bytes/sample, --keep-raw", Rawstack: med(raw, bps), Peer: peer, PeerVal: pv(bps), Better: "lower", Note: or("both keep 8 KiB stack copies")},
		{Scenario: "dwarf", Metric: "report wall time (s), online-unwound trace", Rawstack: med(online, rep), Peer: peer, PeerVal: pv(rep), Better: "lower", Note: or("target: >= 2x faster; perf report --stdio")},
		{Scenario: "dwarf", Metric: "report wall time (s), --keep-raw (unwinds offline)", Rawstack: med(raw, rep), Peer: peer, PeerVal: pv(rep), Better: "lower", Note: or("both unwind at report time")},
		{Scenario: "dwarf", Metric: "record+report wall time (s), online", Rawstack: med(online, total), Peer: peer, PeerVal: pv(total), Better: "lower", Note: or("end to end")},
		{Scenario: "dwarf", Metric: "recorder CPU/sample (us), online unwinding", Rawstack: med(online, cpu), Peer: peer, PeerVal: pv(cpu), Better: "lower", Note: or("rawstack unwinds while recording, perf copies; whole process")},
		{Scenario: "dwarf", Metric: "recorder CPU/sample (us), --keep-raw", Rawstack: med(raw, cpu), Peer: peer, PeerVal: pv(cpu), Better: "lower", Note: or("whole recorder process incl. startup and exit")},
		{Scenario: "dwarf", Metric: "samples with main…deep<8>…deep<1>…leaf (%), online", Rawstack: med(online, chain), Peer: peer, PeerVal: pv(chain), Better: "higher", Note: or("perf script stacks")},
		{Scenario: "dwarf", Metric: "samples with main…leaf (%), --keep-raw", Rawstack: med(raw, chain), Peer: peer, PeerVal: pv(chain), Better: "higher", Note: note},
		{Scenario: "dwarf", Metric: "samples recorded", Rawstack: med(online, n), Peer: peer, PeerVal: pv(n), Better: "higher", Note: note},
	}, nil
}

// timed runs cmd, discarding its output, and returns its wall time.
func timed(cmd *exec.Cmd) (time.Duration, error) {
	var stderr limitedBuf
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %v: %s", cmd.Path, err, stderr.b)
	}
	return time.Since(start), nil
}

// limitedBuf keeps the first 4 KiB written to it.
type limitedBuf struct{ b []byte }

func (l *limitedBuf) Write(p []byte) (int, error) {
	if n := 4096 - len(l.b); n > 0 {
		l.b = append(l.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

// countSamples returns the size of a trace and its number of Sample and
// RawStack events.
func countSamples(path string) (int64, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	r, err := format.NewReader(f)
	if err != nil {
		return 0, 0, err
	}
	var n int64
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, 0, fmt.Errorf("reading %s: %w", path, err)
		}
		if ev.Kind == format.KindSample || ev.Kind == format.KindRawStack {
			n++
		}
	}
	return fi.Size(), n, nil
}
