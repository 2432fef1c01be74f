package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rawstack/rawstack/internal/wine"
)

func init() {
	register(&scenario{name: "windows-wine", order: 100, run: runWindowsWine})
}

// runWindowsWine measures the Windows back end under Wine (not native
// Windows: Wine suspends a thread with a signal and wineserver round
// trips, so every figure here is far above what Windows gives): the
// sampler's CPU per thread-sample and how long threads stay suspended,
// recording 20 parked threads at 100 Hz with --off-cpu (on-CPU sampling
// suspends no thread that does not run), and a snapshot of 100 threads.
func runWindowsWine(cfg *config) ([]row, error) {
	note := func(s string) ([]row, error) {
		return absent("windows-wine", "-", s)
	}
	for _, tool := range []string{"wine", "x86_64-w64-mingw32-gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return note(tool + " not installed")
		}
	}
	repo := "."
	if _, err := os.Stat("go.mod"); err != nil {
		repo = ".."
	}
	shim := filepath.Join(cfg.work, "bcryptprimitives.dll")
	threads := filepath.Join(cfg.work, "threads.exe")
	dumppid := filepath.Join(cfg.work, "dumppid.exe")
	rawstack := filepath.Join(cfg.work, "rawstack.exe")
	for _, c := range [][]string{
		{"x86_64-w64-mingw32-gcc", "-O2", "-shared", "-s", "-o", shim, wine.ShimSource(), "-ladvapi32"},
		{"x86_64-w64-mingw32-gcc", "-O2", "-o", threads, filepath.Join(repo, "platform/windows/testdata/threads.c"), "-ldbghelp"},
		{"x86_64-w64-mingw32-gcc", "-O2", "-o", dumppid, filepath.Join(repo, "benchmarks/testdata/dumppid.c"), "-ldbghelp"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	gob := exec.Command("go", "build", "-o", rawstack, "./cmd/rawstack")
	gob.Dir = repo
	gob.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := gob.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("GOOS=windows go build: %v\n%s", err, out)
	}
	w, err := wine.Open(shim)
	if err != nil {
		return note(fmt.Sprintf("wine prefix: %v", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// startOnce launches threads.exe and waits for the pid it writes. A
	// launch that exits first (Wine occasionally fails to start a process
	// while the previous one is still being torn down) is reported with its
	// exit status and output, and start retries it once.
	type winTarget struct {
		cmd  *exec.Cmd
		done chan struct{}
	}
	startOnce := func(n int) (*winTarget, int, error) {
		pidFile := filepath.Join(cfg.work, fmt.Sprintf("pid%d", n))
		os.Remove(pidFile)
		cmd := w.Command(ctx, threads, strconv.Itoa(n), "600", wine.Path(pidFile))
		var outBuf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
		if err := cmd.Start(); err != nil {
			return nil, 0, err
		}
		t := &winTarget{cmd: cmd, done: make(chan struct{})}
		go func() { cmd.Wait(); close(t.done) }()
		deadline := time.After(3 * time.Minute)
		for {
			if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				return t, pid, nil
			}
			select {
			case <-t.done:
				return nil, 0, fmt.Errorf("threads.exe %d exited (%v) before writing its pid:\n%.1000s", n, cmd.ProcessState, outBuf.String())
			case <-deadline:
				cmd.Process.Kill()
				<-t.done
				return nil, 0, fmt.Errorf("threads.exe %d wrote no pid in 3 minutes:\n%.1000s", n, outBuf.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	start := func(n int) (*winTarget, int, error) {
		t, pid, err := startOnce(n)
		if err != nil {
			fmt.Fprintf(os.Stderr, "windows-wine: %v; retrying once\n", err)
			t, pid, err = startOnce(n)
		}
		return t, pid, err
	}
	stop := func(t *winTarget) { t.cmd.Process.Kill(); <-t.done }

	var rows []row
	// Sampling: 20 parked threads at 100 Hz.
	target, pid, err := start(20)
	if err != nil {
		return nil, err
	}
	secs := "5s"
	if cfg.short {
		secs = "2s"
	}
	trace := filepath.Join(cfg.work, "win.rawstack")
	rec := w.Command(ctx, rawstack, "record", "-F", "100", "--off-cpu", "-p", strconv.Itoa(pid), "--duration", secs, "-o", wine.Path(trace))
	out, err := rec.CombinedOutput()
	stop(target)
	if err != nil {
		return nil, fmt.Errorf("rawstack.exe record: %v\n%s", err, out)
	}
	samples := regexp.MustCompile(`: (\d+) samples,`).FindSubmatch(out)
	susp := regexp.MustCompile(`suspended (\d+) times for p50 (\S+), p99 (\S+), max (\S+)`).FindSubmatch(out)
	if samples == nil || susp == nil {
		return nil, fmt.Errorf("unexpected record output:\n%s", out)
	}
	n, _ := strconv.Atoi(string(samples[1]))
	cpu := rec.ProcessState.UserTime() + rec.ProcessState.SystemTime()
	p50, _ := time.ParseDuration(string(susp[2]))
	p99, _ := time.ParseDuration(string(susp[3]))
	rows = append(rows,
		row{Scenario: "windows-wine sample", Metric: "CPU µs/thread-sample", Rawstack: float64(cpu.Microseconds()) / float64(max(n, 1)), Better: "lower",
			Note: fmt.Sprintf("%d thread-samples of 20 parked threads, 100 Hz, %s; rawstack.exe's CPU, wineserver's not counted", n, secs)},
		row{Scenario: "windows-wine sample", Metric: "suspended p50 ms", Rawstack: ms(p50), Better: "lower", Note: "QPC from before SuspendThread to after ResumeThread"},
		row{Scenario: "windows-wine sample", Metric: "suspended p99 ms", Rawstack: ms(p99), Better: "lower"})

	// Snapshot: 100 parked threads, end to end and threads stopped.
	target, pid, err = start(100)
	if err != nil {
		return nil, err
	}
	defer stop(target)
	// rawstack snapshot and dbghelp's MiniDumpWriteDump (the peer: every
	// thread's context and stack, as debuggers take it) alternate, A B, B A.
	pairs := 11
	if cfg.short {
		pairs = 3 // Wine's MiniDumpWriteDump of 100 threads takes ~20 s here
	}
	var wall, capture, stopped, peer []float64
	statRE := regexp.MustCompile(`capture (\S+) \(threads stopped (\S+)\)`)
	dumpFile := wine.Path(filepath.Join(cfg.work, "peer.dmp"))
	for i := 0; i < pairs; i++ {
		ours := func() error {
			t0 := time.Now()
			out, err := w.Command(ctx, rawstack, "snapshot", "-p", strconv.Itoa(pid), "--stats", "--no-symbols").CombinedOutput()
			d := time.Since(t0)
			if err != nil {
				return fmt.Errorf("rawstack.exe snapshot: %v\n%s", err, out)
			}
			m := statRE.FindSubmatch(out)
			if m == nil {
				return fmt.Errorf("no --stats line:\n%.500s", out)
			}
			c, _ := time.ParseDuration(string(m[1]))
			s, _ := time.ParseDuration(string(m[2]))
			wall, capture, stopped = append(wall, ms(d)), append(capture, ms(c)), append(stopped, ms(s))
			return nil
		}
		theirs := func() error {
			t0 := time.Now()
			if out, err := w.Command(ctx, dumppid, strconv.Itoa(pid), dumpFile).CombinedOutput(); err != nil {
				return fmt.Errorf("dumppid.exe: %v\n%s", err, out)
			}
			peer = append(peer, ms(time.Since(t0)))
			return nil
		}
		if err := inTurn(i, ours, theirs); err != nil {
			return nil, err
		}
	}
	runs := pairs
	rows = append(rows,
		row{Scenario: "windows-wine snapshot 100 threads", Metric: "wall ms (wine start incl.)", Rawstack: median(wall), Peer: "MiniDumpWriteDump", PeerVal: median(peer), Better: "lower",
			Note: fmt.Sprintf("medians of %d alternating pairs; rawstack also unwinds, the peer only writes the dump", runs)},
		row{Scenario: "windows-wine snapshot 100 threads", Metric: "capture ms", Rawstack: median(capture), Better: "lower", Note: "target ≤ 10 ms on Windows"},
		row{Scenario: "windows-wine snapshot 100 threads", Metric: "threads stopped ms", Rawstack: median(stopped), Better: "lower"})
	return rows, nil
}
