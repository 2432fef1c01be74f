package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The ebpf scenario (issue 11): whole-system recording at 100 Hz with
// `rawstack record --backend ebpf -a` (stack copies unwound with CFI on
// the host, and --unwind fp, the kernel's frame-pointer walk in BPF)
// against `perf record -a -g`, and with --off-cpu against perf recording
// the sched_switch tracepoint too, while a CPU-bound workload runs. Each round
// runs the workload unsampled and under each recorder, in turn; a recorder
// is started, given a second to take stock of the system, then the
// workload runs, then the recorder is interrupted. Figures are medians
// over rounds, end to end (recorder start-up, reading /proc, shutdown).
//
// Metrics: the workload's slowdown (its own CPU time, which the BPF
// program's and the kernel's sampling work are charged to), the
// recorder's CPU time and peak RSS, and for rawstack the memory of its BPF
// maps (the kernel's memlock accounting, from /proc/PID/fdinfo). Every
// process of the machine is sampled, so the recorders' CPU depends on what
// else runs: the two are interleaved so that both see the same load.
func init() {
	register(&scenario{name: "ebpf", order: 110, run: runEBPF})
}

type sysRun struct {
	workCPU  float64 // workload CPU ns
	recCPU   float64 // recorder CPU ns (user+sys)
	rssKiB   float64 // recorder peak RSS
	mapBytes float64 // BPF map memory (rawstack)
	samples  float64
}

func runEBPF(cfg *config) ([]row, error) {
	if os.Geteuid() != 0 {
		return absent("ebpf", "skipped", "needs root (CAP_BPF, CAP_PERFMON)")
	}
	load, err := buildC(cfg, "recordload.cc", "-O2", "-fno-omit-frame-pointer")
	if err != nil {
		return nil, err
	}
	// record --backend ebpf runs the rawstack-ebpf companion, looked for
	// next to rawstack.
	rawstack, err := buildCompanions(cfg, "rawstack-ebpf")
	if err != nil {
		return nil, err
	}
	perf, perfErr := exec.LookPath("perf")
	if perfErr != nil {
		if err := needPeer("perf not installed"); err != nil {
			return nil, err
		}
	}
	rounds, reps := "40", 11
	if cfg.short {
		reps = 3
	}
	variants := []struct {
		name string
		cmd  func(out string) *exec.Cmd
	}{
		{"base", nil},
		{"ebpf", func(out string) *exec.Cmd {
			return exec.Command(rawstack, "record", "-q", "--backend", "ebpf", "-a", "-F", "100", "-o", out)
		}},
		{"ebpf-fp", func(out string) *exec.Cmd {
			return exec.Command(rawstack, "record", "-q", "--backend", "ebpf", "--unwind", "fp", "-a", "-F", "100", "-o", out)
		}},
	}
	variants = append(variants, struct {
		name string
		cmd  func(out string) *exec.Cmd
	}{"ebpf-offcpu", func(out string) *exec.Cmd {
		return exec.Command(rawstack, "record", "-q", "--backend", "ebpf", "-a", "--off-cpu", "-F", "100", "-o", out)
	}})
	if perfErr == nil {
		variants = append(variants, struct {
			name string
			cmd  func(out string) *exec.Cmd
		}{"perf", func(out string) *exec.Cmd {
			return exec.Command(perf, "record", "-q", "-a", "-g", "-F", "100", "-o", out)
		}}, struct {
			name string
			cmd  func(out string) *exec.Cmd
		}{"perf-offcpu", func(out string) *exec.Cmd {
			// perf's way to whole-host off-CPU stacks: the same 100 Hz
			// cpu-clock samples plus the call chain of every thread leaving
			// the CPU (the sched_switch tracepoint, each event sampled);
			// durations come later from the switch records' times (perf
			// sched timehist). rawstack's --off-cpu records the same
			// event with the same information and pairs the return on
			// the host.
			// (-F would sample the tracepoint at 100 Hz too: the frequency
			// goes on cpu-clock alone, the tracepoint keeps period 1.)
			return exec.Command(perf, "record", "-q", "-a", "-g", "-e", "cpu-clock/freq=100/", "-e", "sched:sched_switch", "-o", out)
		}})
	}
	runs := map[string][]sysRun{}
	for i := 0; i < reps; i++ {
		// In alternating order: as listed in even rounds, reversed in
		// odd ones.
		order := append(variants[:0:0], variants...)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range order {
			var r sysRun
			var err error
			if v.cmd == nil {
				var lr recordRun
				lr, err = runLoad(exec.Command(load, rounds))
				r.workCPU = lr.cpuNs
			} else {
				out := filepath.Join(cfg.work, v.name+".data")
				isPerf := strings.HasPrefix(v.name, "perf")
				r, err = runUnder(v.cmd(out), load, rounds, !isPerf)
				if err == nil {
					if isPerf {
						_, n, perr := perfSamples(perf, out)
						r.samples, err = float64(n), perr
					} else {
						_, n, cerr := countSamples(out)
						r.samples, err = float64(n), cerr
					}
				}
				os.Remove(out)
			}
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", v.name, i+1, err)
			}
			runs[v.name] = append(runs[v.name], r)
		}
	}
	med := func(name string, f func(sysRun) float64) float64 {
		return medianBy(runs[name], f)
	}
	// pairRatio is the median over rounds of a/b, the figure of a pair
	// measured back to back.
	pairRatio := func(a, b string, f func(sysRun) float64) float64 {
		var v []float64
		for i := range runs[a] {
			if i >= len(runs[b]) || f(runs[b][i]) <= 0 {
				return math.NaN() // a round with no figure of b: no ratio
			}
			v = append(v, f(runs[a][i])/f(runs[b][i]))
		}
		return median(v)
	}
	base := med("base", func(r sysRun) float64 { return r.workCPU })
	work := func(r sysRun) float64 { return r.workCPU }
	cpu := func(r sysRun) float64 { return r.recCPU / 1e6 }
	rss := func(r sysRun) float64 { return r.rssKiB / 1024 }
	smp := func(r sysRun) float64 { return r.samples }
	fmt.Fprintf(cfg.logger, "  %d rounds; workload unsampled %.0f ms CPU\n", reps, base/1e6)
	for _, name := range []string{"ebpf", "ebpf-fp", "perf", "ebpf-offcpu", "perf-offcpu"} {
		if len(runs[name]) > 0 {
			fmt.Fprintf(cfg.logger, "  %s: workload %.0f ms, recorder %.0f ms CPU, %.1f MiB peak RSS, %.0f samples\n",
				name, med(name, work)/1e6, med(name, cpu), med(name, rss), med(name, smp))
		}
	}
	note := fmt.Sprintf("median of %d interleaved rounds; machine shared with other jobs", reps)
	rows := []row{{Scenario: "ebpf", Metric: "workload CPU, unsampled (ms)", Rawstack: base / 1e6, Better: "lower"}}
	for _, v := range []struct{ name, label, peer, peerLabel string }{
		{"ebpf", "-a, stack copies + CFI", "perf", "perf record -a -g"},
		{"ebpf-fp", "-a --unwind fp", "perf", "perf record -a -g"},
		{"ebpf-offcpu", "-a --off-cpu, stack copies + CFI", "perf-offcpu", "perf record -a -g -e cpu-clock/freq=100/ -e sched:sched_switch"},
	} {
		name, label := v.name, v.label
		metric := func(m string, f func(sysRun) float64, scale float64, better, extra string) row {
			r := row{Scenario: "ebpf", Metric: m + " (" + label + ")", Rawstack: med(name, f) / scale, Better: better, Note: extra}
			if len(runs[v.peer]) > 0 {
				r.Peer, r.PeerVal = v.peerLabel, med(v.peer, f)/scale
				if pr := pairRatio(name, v.peer, f); pr > 0 {
					r.Note = strings.TrimSpace(fmt.Sprintf("pair ratio %.2f; %s", pr, extra))
				}
			}
			return r
		}
		rows = append(rows,
			metric("workload slowdown at 100 Hz (x)", work, base, "lower", ""),
			metric("recorder CPU (ms)", cpu, 1, "lower", "target: <= perf's"),
			metric("recorder peak RSS (MiB)", rss, 1, "lower", "target: <= 64 MiB"),
			metric("samples", smp, 1, "higher", sampleNote(name)),
		)
		rows = append(rows, row{Scenario: "ebpf", Metric: "BPF map memory, memlock (MiB) (" + label + ")",
			Rawstack: med(name, func(r sysRun) float64 { return r.mapBytes }) / (1 << 20), Better: "lower", Note: "ring buffer + per-CPU scratch + pid maps"})
	}
	rows[len(rows)-1].Note += "; " + note
	return rows, nil
}

// runUnder starts recorder, lets it settle for a second, runs the
// workload, then interrupts the recorder and waits for it. bpfMaps says
// to read the recorder's BPF map memory before stopping it.
func runUnder(recorder *exec.Cmd, load, rounds string, bpfMaps bool) (sysRun, error) {
	var r sysRun
	var stderr limitedBuf
	recorder.Stderr = &stderr
	if err := recorder.Start(); err != nil {
		return r, err
	}
	// RSS over the recorder's whole life, start to exit, as its CPU
	// time (wait4 at exit) is: its peak while it shuts down counts.
	rss := watchRSS(recorder.Process.Pid, load)
	time.Sleep(time.Second)
	lr, err := runLoad(exec.Command(load, rounds))
	if err != nil {
		rss.peakKiB()
		recorder.Process.Kill()
		recorder.Wait()
		return r, err
	}
	r.workCPU = lr.cpuNs
	if bpfMaps {
		r.mapBytes = bpfMapMemory(recorder.Process.Pid)
	}
	rss.finishing()
	recorder.Process.Signal(os.Interrupt)
	err = recorder.Wait()
	r.rssKiB = float64(rss.peakKiB())
	if err != nil {
		// perf record re-raises the SIGINT it handled, to exit by it.
		if ws, ok := recorder.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
			return r, fmt.Errorf("%s: %v: %s", recorder.Path, err, stderr.b)
		}
	}
	st := recorder.ProcessState
	r.recCPU = float64((st.UserTime() + st.SystemTime()).Nanoseconds())
	return r, nil
}

// bpfMapMemory sums the memlock of the BPF map file descriptors of pid
// and its children (rawstack runs rawstack-ebpf), as /proc/PID/fdinfo
// reports them.
func bpfMapMemory(pid int) float64 {
	total := pidMapMemory(pid)
	// A child is listed under the thread that forked it.
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, tk := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, tk.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				total += pidMapMemory(c)
			}
		}
	}
	return total
}

func pidMapMemory(pid int) float64 {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var total float64
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var isMap bool
		var memlock float64
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "map_type:") {
				isMap = true
			}
			if v, ok := strings.CutPrefix(line, "memlock:"); ok {
				memlock, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
		f.Close()
		if isMap {
			total += memlock
		}
	}
	return total
}

// sampleNote says what the off-CPU rows' sample counts count.
func sampleNote(name string) string {
	if name != "ebpf-offcpu" {
		return ""
	}
	return "rawstack: on-CPU samples + one per completed off-CPU interval of a user thread; perf: on-CPU samples + one per switch of any task"
}
