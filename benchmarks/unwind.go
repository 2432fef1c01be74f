package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The unwind scenario (issue 14) is how the default --unwind was chosen:
// fp, dwarf and auto, runs interleaved, on two programs a newcomer
// records:
//
//   - tracer/testdata/shrinkwrap.c, gcc -O2 -fno-omit-frame-pointer, main→a→b→c where c is
//     shrink-wrapped (its hot loop runs before it pushes a frame): the
//     share of samples in c that read main→a→b→c;
//   - a CPU-bound Python 3.11 program under Debian's python3 (built
//     without frame pointers): the share of samples that reach main.
//
// Each mode also gets trace bytes per sample and the recorder's CPU time
// per sample (the rawstack process's CPU minus the workload's own).
func init() {
	register(&scenario{name: "unwind", order: 54, run: runUnwind})
}

type unwindWork struct {
	name string
	cmd  []string
	good func(frames []string) (counted, ok bool)
}

type unwindStat struct{ bps, cpuUs, good []float64 }

func runUnwind(cfg *config) ([]row, error) {
	sw, err := buildC(cfg, "tracer/testdata/shrinkwrap.c", "-O2", "-g", "-fno-omit-frame-pointer")
	if err != nil {
		return nil, err
	}
	cli, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	secs, reps := "1", 11
	if cfg.short {
		secs, reps = "0.5", 3
	}
	works := []unwindWork{{
		name: "shrink-wrapped C",
		cmd:  []string{sw, secs},
		good: func(f []string) (bool, bool) {
			if len(f) == 0 || f[len(f)-1] != "c" {
				return false, false
			}
			return true, strings.HasSuffix(strings.Join(f, ";"), "main;a;b;c")
		},
	}}
	py := "/usr/bin/python3"
	pyNote := ""
	if _, err := os.Stat(py); err != nil {
		pyNote = "Debian's python3 not installed"
		if err := needPeer(pyNote); err != nil {
			return nil, err
		}
	} else {
		script := filepath.Join("benchmarks", "testdata", "pyload.py")
		if _, err := os.Stat(script); err != nil {
			script = filepath.Join("testdata", "pyload.py")
		}
		works = append(works, unwindWork{
			name: "python3",
			cmd:  []string{py, script, secs},
			good: func(f []string) (bool, bool) {
				for _, n := range f {
					// main tail-calls Py_BytesMain and is stripped.
					if n == "main" || n == "Py_BytesMain" {
						return true, true
					}
				}
				return true, false
			},
		})
	}
	modes := []string{"fp", "dwarf", "auto"}
	stats := map[string]*unwindStat{}
	for r := 0; r < reps; r++ {
		for _, w := range works {
			sides := make([]func() error, len(modes))
			for i, m := range modes {
				sides[i] = func() error {
					out := filepath.Join(cfg.work, "unwind.rawstack")
					cmd := exec.Command(cli, append([]string{"record", "-q", "-F", "1000", "--unwind", m, "-o", out, "--"}, w.cmd...)...)
					lr, err := runLoad(cmd)
					if err != nil {
						return fmt.Errorf("%s --unwind %s: %w", w.name, m, err)
					}
					bytes, samples, err := countSamples(out)
					if err != nil {
						return err
					}
					good, err := foldedShare(cli, out, w.good)
					if err != nil {
						return err
					}
					k := w.name + "/" + m
					if stats[k] == nil {
						stats[k] = &unwindStat{}
					}
					s := stats[k]
					s.bps = append(s.bps, float64(bytes)/float64(max(samples, 1)))
					s.cpuUs = append(s.cpuUs, (lr.allNs-lr.cpuNs)/float64(max(samples, 1))/1e3)
					s.good = append(s.good, 100*good)
					fmt.Fprintf(cfg.logger, "  %s --unwind %s: %d samples, %.0f B/sample, %.1f us recorder CPU/sample, %.1f%% good\n", w.name, m, samples, s.bps[len(s.bps)-1], s.cpuUs[len(s.cpuUs)-1], 100*good)
					return nil
				}
			}
			// The modes of one workload in alternating order, round by round.
			if err := inTurn(r, sides...); err != nil {
				return nil, err
			}
		}
	}
	var rows []row
	for _, w := range works {
		metric := map[string]string{"shrink-wrapped C": "samples in c reading main→a→b→c (%)", "python3": "samples reaching main (Py_BytesMain) (%)"}[w.name]
		for _, m := range modes {
			s := stats[w.name+"/"+m]
			fp := stats[w.name+"/fp"]
			rows = append(rows,
				row{Scenario: "unwind", Metric: fmt.Sprintf("%s, --unwind %s: %s", w.name, m, metric), Rawstack: median(s.good), Better: "higher"},
				row{Scenario: "unwind", Metric: fmt.Sprintf("%s, --unwind %s: trace bytes/sample", w.name, m), Rawstack: median(s.bps), Peer: "--unwind fp", PeerVal: median(fp.bps), Better: "lower"},
				row{Scenario: "unwind", Metric: fmt.Sprintf("%s, --unwind %s: recorder CPU/sample (us)", w.name, m), Rawstack: median(s.cpuUs), Peer: "--unwind fp", PeerVal: median(fp.cpuUs), Better: "lower",
					Note: "target for auto on shrink-wrapped C: within 25% of fp"},
			)
		}
	}
	if pyNote != "" {
		rows = append(rows, row{Scenario: "unwind", Metric: "python3", Note: pyNote})
	}
	return rows, nil
}

// foldedShare converts a trace to folded stacks (root first) and returns,
// of the samples good counts, the share it accepts.
func foldedShare(cli, trace string, good func([]string) (bool, bool)) (float64, error) {
	out, err := exec.Command(cli, "convert", trace, "--to", "folded", "--no-debuginfod").Output()
	if err != nil {
		return 0, fmt.Errorf("rawstack convert: %w", err)
	}
	var all, ok int
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		n, err := strconv.Atoi(line[sp+1:])
		if err != nil {
			continue
		}
		frames := strings.Split(line[:sp], ";")
		for i := range frames {
			if j := strings.IndexByte(frames[i], ' '); j > 0 {
				frames[i] = frames[i][:j] // "name (inlined)" and the like
			}
		}
		counted, g := good(frames)
		if !counted {
			continue
		}
		all += n
		if g {
			ok += n
		}
	}
	return float64(ok) / float64(max(all, 1)), nil
}
