package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/pprof/profile"
)

// The goswitch scenario (issue 31): Go programs whose time is spent
// across the runtime's stack switches, recorded in each unwind mode and
// with the eBPF back end, against the program's own runtime/pprof CPU
// profile of the same run (cmd/rawstack/testdata/goswitch, built with
// cgo, DWARF kept):
//
//   - cgo: Go calls C built without frame pointers (runtime.asmcgocall);
//     the share of the samples in the C code (c_leaf) whose stack keeps
//     main.goCaller → main.goTop above the C frames.
//   - alloc: main.allocTop allocates; half of its CPU runs on the g0
//     stack under runtime.systemstack. Its share against runtime/pprof's.
//   - chan: goroutines hand values over channels; the scheduler runs on
//     g0 under runtime.mcall (a root in runtime/pprof too: the parked
//     goroutine has given up its thread). main.pingPong's share against
//     runtime/pprof's.
//
// Shares leave out the samples of Ms on their own stacks (runtime.mstart:
// sysmon, idle Ms), which runtime/pprof does not sample. Medians of the
// rounds; the modes run in alternating order within a round.
func init() {
	register(&scenario{name: "goswitch", order: 165, run: runGoSwitch})
}

func runGoSwitch(cfg *config) ([]row, error) {
	rawstack, err := buildCompanions(cfg, "rawstack-ebpf")
	if err != nil {
		return nil, err
	}
	fixture := filepath.Join(cfg.work, "goswitch")
	src := filepath.Join("cmd", "rawstack", "testdata", "goswitch")
	if _, err := os.Stat(src); err != nil {
		src = filepath.Join("..", src)
	}
	b := exec.Command("go", "build", "-o", fixture, ".")
	b.Dir, b.Env = src, append(os.Environ(), "CGO_ENABLED=1")
	if out, err := b.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build goswitch: %v\n%s", err, out)
	}
	modes := [][]string{{"--unwind", "fp"}, {"--unwind", "dwarf"}, {"--unwind", "auto"}, {"--backend", "ebpf"}}
	if os.Geteuid() != 0 {
		if err := needPeer("the eBPF back end needs root"); err != nil {
			return nil, err
		}
		modes = modes[:3]
	}
	dur, rounds := "3s", 5
	if cfg.short {
		dur, rounds = "1s", 1
	}
	type work struct {
		name, fn, metric string
		share            func(trace string) (float64, error)
	}
	works := []work{
		{"cgo", "", "samples in C (c_leaf) keeping main.goCaller → main.goTop (%)", func(trace string) (float64, error) {
			return tracePart(rawstack, trace, func(f string) (bool, bool) {
				return strings.Contains(f, ";c_leaf"), strings.Contains(f, "main.goCaller;main.goTop;")
			})
		}},
		{"alloc", "main.allocTop", "main.allocTop's share of CPU (%)", nil},
		{"chan", "main.pingPong", "main.pingPong's share of CPU (%)", nil},
	}
	got := map[string][]float64{}
	want := map[string][]float64{}
	for r := 0; r < rounds; r++ {
		for _, w := range works {
			sides := make([]func() error, len(modes))
			for i, m := range modes {
				sides[i] = func() error {
					trace := filepath.Join(cfg.work, "goswitch.rawstack")
					prof := filepath.Join(cfg.work, "goswitch.pprof")
					if w.fn == "" {
						prof = "-"
					}
					args := append(append([]string{"record", "-q", "-F", "999", "-o", trace}, m...), "--", fixture, w.name, dur, prof)
					if out, err := exec.Command(rawstack, args...).CombinedOutput(); err != nil {
						return fmt.Errorf("rawstack %s: %v\n%s", strings.Join(args, " "), err, out)
					}
					k := w.name + " " + strings.Join(m, " ")
					var s float64
					var err error
					if w.share != nil {
						s, err = w.share(trace)
					} else {
						s, err = tracePart(rawstack, trace, func(f string) (bool, bool) {
							return !strings.Contains(f, "runtime.mstart"), strings.Contains(f, w.fn)
						})
						if err == nil {
							var p float64
							if p, err = profileShare(prof, w.fn); err == nil {
								want[k] = append(want[k], 100*p)
							}
						}
					}
					if err != nil {
						return err
					}
					got[k] = append(got[k], 100*s)
					fmt.Fprintf(cfg.logger, "  goswitch %s: %.1f%%\n", k, 100*s)
					return nil
				}
			}
			if err := inTurn(r, sides...); err != nil {
				return nil, err
			}
		}
	}
	var rows []row
	for _, w := range works {
		for _, m := range modes {
			k := w.name + " " + strings.Join(m, " ")
			rw := row{Scenario: "goswitch", Metric: fmt.Sprintf("%s, %s: %s", w.name, strings.Join(m, " "), w.metric), Rawstack: median(got[k])}
			if w.fn != "" {
				rw.Peer, rw.PeerVal = "runtime/pprof, same run", median(want[k])
				rw.Note = fmt.Sprintf("%+.1f points; goal within 5 in auto, dwarf and eBPF", rw.Rawstack-rw.PeerVal)
			} else {
				rw.Better, rw.Note = "higher", "goal >= 95 in auto, dwarf and eBPF"
			}
			rows = append(rows, rw)
		}
	}
	return rows, nil
}

// tracePart converts a trace to folded stacks and returns, of the samples
// whose folded stack pick counts, the share it accepts.
func tracePart(cli, trace string, pick func(folded string) (counted, ok bool)) (float64, error) {
	out, err := exec.Command(cli, "convert", trace, "--to", "folded", "--no-debuginfod").Output()
	if err != nil {
		return 0, fmt.Errorf("rawstack convert: %w", err)
	}
	var all, hit float64
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		var n float64
		if _, err := fmt.Sscan(line[sp+1:], &n); err != nil {
			continue
		}
		counted, ok := pick(line[:sp])
		if !counted {
			continue
		}
		all += n
		if ok {
			hit += n
		}
	}
	if all == 0 {
		return 0, fmt.Errorf("%s: no samples counted", trace)
	}
	return hit / all, nil
}

// profileShare returns the share of a runtime/pprof CPU profile's time
// whose stacks hold function fn.
func profileShare(path, fn string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	var all, hit int64
	for _, s := range p.Sample {
		v := s.Value[len(s.Value)-1]
		all += v
	hold:
		for _, l := range s.Location {
			for _, ln := range l.Line {
				if ln.Function != nil && ln.Function.Name == fn {
					hit += v
					break hold
				}
			}
		}
	}
	if all == 0 {
		return 0, fmt.Errorf("%s: no samples", path)
	}
	return float64(hit) / float64(all), nil
}
