package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The goroutines scenario (issue 13) lists every goroutine of a Go
// process with 10,000 goroutines parked in one chain (and one spinning),
// end to end as a user runs it, runs interleaved:
//
//   - rawstack snapshot -p PID --goroutines (runs rawstack-goroutines)
//   - dlv attach PID with `goroutines -t` in batch mode (dlv built with
//     go install in this scenario's setup, the same delve version rawstack
//     links; its `exit` asks whether to kill the process, and the closed
//     stdin answers no: dlv detaches)
//   - an HTTP fetch (curl) of the fixture's /debug/pprof/goroutine?debug=2
//
// and how long the target's threads are in tracing stop, seen from
// outside by polling /proc/PID/stat of the main thread every 100 µs, so
// both tools are measured the same way. The debug=2 handler stops the
// world inside the process for its whole traceback; that stop is not
// visible from outside and is not measured.
func init() {
	register(&scenario{name: "goroutines", order: 130, run: runGoroutines})
}

const delveVersion = "v1.27.2" // keep in step with go.mod

func runGoroutines(cfg *config) ([]row, error) {
	n, runs := 10000, 11
	if cfg.short {
		n, runs = 1000, 3
	}
	src := filepath.Join("platform", "snapshot", "goroutines", "testdata", "parked")
	if _, err := os.Stat(src); err != nil {
		src = filepath.Join("..", src) // run from inside benchmarks/
	}
	fixture := filepath.Join(cfg.work, "parked")
	build := exec.Command("go", "build", "-o", fixture, ".")
	build.Dir, build.Env = src, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build parked: %v\n%s", err, out)
	}
	cli, err := buildCLI(cfg)
	if err != nil {
		return nil, err
	}
	helper := filepath.Join(cfg.work, "rawstack-goroutines")
	if out, err := exec.Command("go", "build", "-o", helper, "github.com/rawstack/rawstack/cmd/rawstack-goroutines").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build rawstack-goroutines: %v\n%s", err, out)
	}
	gobin := filepath.Join(cfg.work, "gobin")
	dlv := filepath.Join(gobin, "dlv")
	dlvSkip := ""
	inst := exec.Command("go", "install", "github.com/go-delve/delve/cmd/dlv@"+delveVersion)
	inst.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := inst.CombinedOutput(); err != nil {
		dlvSkip = fmt.Sprintf("go install dlv@%s failed: %v %s", delveVersion, err, bytes.TrimSpace(out))
	}
	initFile := filepath.Join(cfg.work, "dlv-init")
	if err := os.WriteFile(initFile, []byte("goroutines -t\nexit\n"), 0o644); err != nil {
		return nil, err
	}
	curlSkip := ""
	if _, err := exec.LookPath("curl"); err != nil {
		curlSkip = "curl not installed"
	}

	target := exec.Command(fixture, "-n", strconv.Itoa(n), "-http", "127.0.0.1:0")
	stdout, err := target.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := target.Start(); err != nil {
		return nil, err
	}
	defer func() {
		target.Process.Kill()
		target.Wait()
	}()
	addr := ""
	br := bufio.NewReader(stdout)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("fixture not ready: %v", err)
		}
		line = strings.TrimSpace(line)
		if a, ok := strings.CutPrefix(line, "http "); ok {
			addr = a
		}
		if line == "ready" {
			break
		}
	}
	go io.Copy(io.Discard, br)
	pid := target.Process.Pid
	url := "http://" + addr + "/debug/pprof/goroutine?debug=2"

	// Counts from the runtime itself, to check each tool saw everything.
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	runtimeCount := bytes.Count(body, []byte("\ngoroutine ")) + 1

	type tool struct {
		name    string
		args    []string
		ms      []float64
		cpu     []float64 // ms of user+system CPU of the tool's process
		stopped []float64 // ms in tracing stop, seen from /proc
		count   int       // goroutines listed
		skip    string
	}
	raw := &tool{name: "rawstack", args: []string{cli, "snapshot", "-p", strconv.Itoa(pid), "--goroutines", "--stats"}}
	dl := &tool{name: "dlv", args: []string{dlv, "attach", strconv.Itoa(pid), "--init", initFile, "--allow-non-terminal-interactive=true"}, skip: dlvSkip}
	cu := &tool{name: "curl", args: []string{"curl", "-s", url}, skip: curlSkip}
	tools := []*tool{raw, dl, cu}
	var selfStopped, copied []float64
	statsRE := regexp.MustCompile(`threads stopped ([\d.]+)(µs|ms|s), ([\d.]+) MB copied`)
	var pairs []float64 // dlv/rawstack of each round
	for i := 0; i < runs; i++ {
		// The tools in alternating order: as listed in even rounds,
		// reversed in odd ones.
		order := append([]*tool(nil), tools...)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		nr, nd := len(raw.ms), len(dl.ms)
		for _, t := range order {
			if t.skip != "" {
				continue
			}
			cmd := exec.Command(t.args[0], t.args[1:]...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &errb, nil
			poll := pollStopped(pid)
			start := time.Now()
			err := cmd.Run()
			d := time.Since(start)
			stoppedFor := poll()
			if t.name == "dlv" && err != nil && bytes.Contains(out.Bytes(), []byte(" goroutines]")) {
				err = nil // dlv exits 2 when its kill question meets the closed stdin; it has detached
			}
			if err != nil {
				t.skip = fmt.Sprintf("%s failed: %v: %s", t.name, err, lastLine(errb.Bytes()))
				continue
			}
			t.ms = append(t.ms, ms(d))
			t.cpu = append(t.cpu, ms(cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime()))
			t.stopped = append(t.stopped, ms(stoppedFor))
			switch t.name {
			case "rawstack":
				t.count = bytes.Count(out.Bytes(), []byte("\ngoroutine "))
				if m := statsRE.FindSubmatch(errb.Bytes()); m != nil {
					v, _ := strconv.ParseFloat(string(m[1]), 64)
					switch string(m[2]) {
					case "µs":
						v /= 1000
					case "s":
						v *= 1000
					}
					selfStopped = append(selfStopped, v)
					mb, _ := strconv.ParseFloat(string(m[3]), 64)
					copied = append(copied, mb)
				} else {
					return nil, fmt.Errorf("rawstack snapshot --goroutines --stats printed no threads stopped line: %s", lastLine(errb.Bytes()))
				}
			case "dlv":
				t.count = bytes.Count(out.Bytes(), []byte("Goroutine "))
			case "curl":
				t.count = bytes.Count(out.Bytes(), []byte("\ngoroutine ")) + 1
			}
		}
		if len(raw.ms) > nr && len(dl.ms) > nd {
			pairs = append(pairs, dl.ms[nd]/raw.ms[nr])
		}
	}
	if raw.skip != "" {
		return nil, errors.New(raw.skip)
	}
	for _, t := range []*tool{dl, cu} {
		// A peer missing or failing: a note on a laptop, an error in CI.
		if t.skip != "" {
			if err := needPeer(t.skip); err != nil {
				return nil, err
			}
			t.ms, t.cpu, t.stopped = nil, nil, nil // runs before a failure are not a figure
			if t == dl {
				pairs = nil
			}
		}
	}
	for _, t := range tools {
		fmt.Fprintf(cfg.logger, "  %s: %d runs, median %.1f ms, CPU %.1f ms, stopped %.1f ms, %d goroutines listed %s\n", t.name, len(t.ms), median(t.ms), median(t.cpu), median(t.stopped), t.count, t.skip)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	counts := fmt.Sprintf("goroutines listed: rawstack %d, dlv %d, debug=2 %d, runtime %d; loadavg %s", raw.count, dl.count, cu.count, runtimeCount, strings.Join(strings.Fields(string(load))[:3], " "))
	label := fmt.Sprintf("%d goroutines", n)
	rows := []row{
		{Scenario: "goroutines", Metric: "ms end to end, " + label, Rawstack: median(raw.ms), Peer: "dlv attach + goroutines -t", PeerVal: median(dl.ms), Better: "lower",
			Note: strings.TrimSpace(fmt.Sprintf("median of %d pair ratios %.2fx (goal ≥ 10x); ", len(pairs), median(pairs)) + raw.skip + " " + dl.skip + " " + counts)},
		{Scenario: "goroutines", Metric: "ms end to end, " + label, Rawstack: median(raw.ms), Peer: "curl debug=2", PeerVal: median(cu.ms), Better: "lower", Note: cu.skip},
		{Scenario: "goroutines", Metric: "ms CPU (user+sys), " + label, Rawstack: median(raw.cpu), Peer: "dlv attach + goroutines -t", PeerVal: median(dl.cpu), Better: "lower", Note: "robust where the machine is loaded: wall times are not"},
		{Scenario: "goroutines", Metric: "ms target in tracing stop (/proc poll)", Rawstack: median(raw.stopped), Peer: "dlv attach + goroutines -t", PeerVal: median(dl.stopped), Better: "lower", Note: "debug=2 stops the world in-process for its traceback instead (not visible here)"},
		{Scenario: "goroutines", Metric: "ms threads stopped (rawstack's own clock)", Rawstack: median(selfStopped), Better: "lower", Note: "first PTRACE_SEIZE to last detach (goal ≤ 10 ms): brackets every thread's stop, the /proc poll samples the main thread every 100 µs"},
		{Scenario: "goroutines", Metric: "MB of target memory copied", Rawstack: median(copied), Better: "lower", Note: "allgs, the g's, the m's and the used part of each stack, reads merged by page"},
	}
	return rows, nil
}

// pollStopped polls the state of pid's main thread every 100 µs until the
// returned function is called, which returns how long the thread was seen
// in tracing stop ('t'), from the first sighting to the last.
func pollStopped(pid int) func() time.Duration {
	done := make(chan struct{})
	result := make(chan time.Duration, 1)
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	go func() {
		var first, last time.Time
		buf := make([]byte, 512)
		for {
			select {
			case <-done:
				if first.IsZero() {
					result <- 0
				} else {
					result <- last.Sub(first)
				}
				return
			default:
			}
			f, err := os.Open(path)
			if err == nil {
				n, _ := f.Read(buf)
				f.Close()
				if i := bytes.LastIndexByte(buf[:n], ')'); i >= 0 && i+2 < n && buf[i+2] == 't' {
					now := time.Now()
					if first.IsZero() {
						first = now
					}
					last = now
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	return func() time.Duration {
		close(done)
		return <-result
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
