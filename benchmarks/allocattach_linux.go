package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The attached half of the alloc scenario (issue 35): record --alloc -p
// PID injects the allocation sampler into a running process. The
// workload is the allocation service of package allocshim's tests
// (platform/linux/allocshim/testdata/allocrate.c: the alloc loop of
// allocload.c in one thread, and a control thread running the same
// loop through pointers to the allocator that no slot redirects). Its
// throughput is read from its own counter: the sampled thread's rounds
// per second of its CPU time over the control thread's, on swapped CPUs
// (a process's rate read alone moved by ±30% from one window to the
// next on a 2-vCPU machine shared with other jobs). Each round reads it
// unattached, then with `rawstack record --alloc -p PID` attached (the
// command as a user runs it; read once the sampler has mapped its
// ring), then detaches it (SIGINT); the same with --backend perf; and
// beside them heaptrack -p, which
// injects its own library through gdb, on a process of its own (a
// heaptrack that is stopped leaves its library writing into a closed
// pipe). The figure is the median over the rounds of each round's
// unattached/attached ratio. The process's RSS is read before the first
// attach and after the last detach: 22 attaches and detaches in all.

// rateProc is allocrate.c running.
type rateProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startRateProc(bin string) (*rateProc, error) {
	p := &rateProc{cmd: exec.Command(bin, "1")}
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewReader(stdout)
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	if l, err := p.out.ReadString('\n'); err != nil || l != "ready\n" {
		p.stop()
		return nil, fmt.Errorf("%s: %q, %v", bin, l, err)
	}
	return p, nil
}

func (p *rateProc) stop() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// rate reads the throughput ratio over ms, retried when a window gave a
// thread no CPU at all (0).
func (p *rateProc) rate(ms int) (float64, error) {
	for try := 0; try < 5; try++ {
		if _, err := fmt.Fprintf(p.in, "rate %d\n", ms); err != nil {
			return 0, err
		}
		l, err := p.out.ReadString('\n')
		if err != nil {
			return 0, err
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(l, "rate ")), 64)
		if err != nil {
			return 0, fmt.Errorf("allocrate: %q", l)
		}
		if v > 0 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("allocrate: no CPU for a thread in 5 windows")
}

func (p *rateProc) rssKiB() float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return n
		}
	}
	return 0
}

// waitMapped waits until process pid maps a file whose path contains
// what (an attach is done).
func waitMapped(pid int, what string, within time.Duration) error {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		if strings.Contains(string(b), what) {
			return nil
		}
	}
	return fmt.Errorf("pid %d maps no %s after %v", pid, what, within)
}

// attachRounds runs the attached rounds and returns the rows.
func attachRounds(cfg *config, rawstack, heaptrack string, rounds int) ([]row, error) {
	bin, err := buildC(cfg, "platform/linux/allocshim/testdata/allocrate.c", "-O2", "-g", "-pthread")
	if err != nil {
		return nil, err
	}
	ms := 1000
	if cfg.short {
		ms = 300
	}
	target, err := startRateProc(bin)
	if err != nil {
		return nil, err
	}
	defer target.stop()
	pid := target.cmd.Process.Pid
	type round struct{ raw, perf, ht float64 }
	var rs []round
	rss0 := target.rssKiB()
	trace := cfg.work + "/alloc-p.rawstack"
	for r := 0; r < rounds; r++ {
		var c round
		// attached reads the target's rate, then attached with
		// record --alloc -p and flags, and stores the ratio in *ratio.
		attached := func(ratio *float64, flags ...string) error {
			base, err := target.rate(ms)
			if err != nil {
				return err
			}
			rec := exec.Command(rawstack, append(append([]string{"record", "-q"}, flags...), "--alloc", "-p", strconv.Itoa(pid), "-o", trace)...)
			errb, err := os.CreateTemp(cfg.work, "record-*.err")
			if err != nil {
				return err
			}
			defer os.Remove(errb.Name())
			defer errb.Close()
			rec.Stderr = errb // a file: a companion left behind holds no pipe Wait waits on
			stderr := func() string { b, _ := os.ReadFile(errb.Name()); return string(b) }
			if err := rec.Start(); err != nil {
				return err
			}
			// Attached once the sampler maps its ring (named after the
			// recorder's companion, rawstack-ebpf; gone from the maps at
			// each detach).
			if err := waitMapped(pid, "/alloc-ring-", 30*time.Second); err != nil {
				rec.Process.Kill()
				rec.Wait()
				return fmt.Errorf("record --alloc -p: %v\n%s", err, stderr())
			}
			during, err := target.rate(ms)
			rec.Process.Signal(syscall.SIGINT)
			if werr := rec.Wait(); werr != nil && err == nil {
				err = fmt.Errorf("record --alloc -p: %v\n%s", werr, stderr())
			}
			*ratio = base / during
			return err
		}
		sides := []func() error{
			func() error { return attached(&c.raw) },
			func() error { return attached(&c.perf, "--backend", "perf") },
		}
		if heaptrack != "" {
			sides = append(sides, func() error {
				p, err := startRateProc(bin)
				if err != nil {
					return err
				}
				defer p.stop()
				base, err := p.rate(ms)
				if err != nil {
					return err
				}
				ht := exec.Command(heaptrack, "-p", strconv.Itoa(p.cmd.Process.Pid), "-o", cfg.work+"/alloc-p.heaptrack")
				// heaptrack -p writes heaptrack.NAME.PID.zst into its
				// working directory whatever -o says.
				ht.Dir = cfg.work
				ht.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				if err := ht.Start(); err != nil {
					return err
				}
				defer func() {
					syscall.Kill(-ht.Process.Pid, syscall.SIGKILL)
					ht.Wait()
				}()
				if err := waitMapped(p.cmd.Process.Pid, "libheaptrack_inject", 60*time.Second); err != nil {
					return fmt.Errorf("heaptrack -p: %v", err)
				}
				time.Sleep(100 * time.Millisecond) // past its injection's own work
				attached, err := p.rate(ms)
				c.ht = base / attached
				return err
			})
		}
		if err := inTurn(r, sides...); err != nil {
			return nil, err
		}
		rs = append(rs, c)
	}
	after, err := target.rate(ms)
	if err != nil {
		return nil, err
	}
	_ = after
	rss1 := target.rssKiB()
	attachRow := row{Scenario: "alloc", Metric: "target slowdown, record --alloc -p PID (injected sampler, default rate; its own counter)", Rawstack: medianBy(rs, func(c round) float64 { return c.raw }), Better: "lower", Note: "goal <= 1.1"}
	perfRow := row{Scenario: "alloc", Metric: "target slowdown, record --backend perf --alloc -p PID (same)", Rawstack: medianBy(rs, func(c round) float64 { return c.perf }), Better: "lower", Note: "goal <= 1.1"}
	if heaptrack != "" {
		attachRow.Peer, attachRow.PeerVal = "heaptrack -p", medianBy(rs, func(c round) float64 { return c.ht })
		perfRow.Peer, perfRow.PeerVal = attachRow.Peer, attachRow.PeerVal
	} else {
		attachRow.Note += "; heaptrack not installed"
	}
	return []row{attachRow, perfRow,
		{Scenario: "alloc", Metric: fmt.Sprintf("target RSS growth MiB over %d attaches and detaches", 2*rounds), Rawstack: (rss1 - rss0) / 1024, Better: "lower", Note: "goal <= 1"},
	}, nil
}
