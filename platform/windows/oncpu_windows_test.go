//go:build windows && amd64

package windows

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/win"
	"github.com/rawstack/rawstack/platform"
)

// TestOnCPUFilter samples this process while one thread spins and eight
// are parked, once on CPU (the default) and once suspending every thread at
// every tick as the sampler did before: with the filter the parked threads
// are never suspended, the spinning thread's samples carry the CPU time it
// used, and the log gives the suspension cost the filter saves.
func TestOnCPUFilter(t *testing.T) {
	const parked = 8
	release := make(chan struct{})
	defer close(release)
	for i := 0; i < parked; i++ {
		go func() {
			runtime.LockOSThread() // a thread of its own, blocked
			<-release
		}()
	}
	got := make(chan uint32)
	stop := false
	spun := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		got <- win.CurrentThreadID()
		spinA(&stop)
		close(spun)
	}()
	spinTid := <-got
	spinH, err := win.OpenThread(spinTid)
	if err != nil {
		t.Fatal(err)
	}
	defer win.CloseHandle(spinH)
	time.Sleep(50 * time.Millisecond)

	type result struct {
		st            platform.Stats
		secs          float64
		spin, other   int
		spinW, otherW uint64
		threads       int
		spinCPU       time.Duration // what the spinning thread used meanwhile
	}
	run := func(wallClock bool) result {
		c := newCollector()
		s, err := Open(platform.Config{Frequency: 200}, c)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		// Open found the thread last thing: from here it is sampled.
		c0, _ := win.ThreadCPUTime(spinH)
		s.wallClock = wallClock
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		began := time.Now()
		if err := s.Run(ctx); err != nil {
			t.Fatal(err)
		}
		c1, _ := win.ThreadCPUTime(spinH)
		r := result{st: s.Stats(), secs: time.Since(began).Seconds(), threads: len(c.threads), spinCPU: time.Duration(c1 - c0)}
		for _, smp := range c.samples {
			if smp.Tid == spinTid {
				r.spin++
				r.spinW += smp.Weight
			} else {
				r.other++
				r.otherW += smp.Weight
			}
		}
		return r
	}
	wall := run(true)
	cpu := run(false)
	// What the filter costs: one GetThreadTimes per thread per round.
	const calls = 200
	began := time.Now()
	for i := 0; i < calls; i++ {
		win.ThreadCPUTime(spinH)
	}
	perCall := time.Since(began) / calls
	stop = true
	<-spun
	t.Logf("GetThreadTimes: %v per thread per round", perCall)
	for _, x := range []struct {
		name string
		r    result
	}{{"every thread", wall}, {"on-CPU only", cpu}} {
		t.Logf("%s: %d threads, %.1f rounds/s of %d asked: %.0f suspensions/s, %v suspended in all (p50 %v, max %v), %d idle thread-ticks skipped; samples: %d of the spinning thread (%v CPU), %d of others (%v CPU); %.0f samples per CPU-second; the spinning thread used %v",
			x.name, x.r.threads, x.r.st.TickHz, x.r.st.AskedHz, float64(x.r.st.Suspensions)/x.r.secs, time.Duration(x.r.st.SuspendTotal),
			time.Duration(x.r.st.SuspendP50), time.Duration(x.r.st.SuspendMax), x.r.st.IdleSkips,
			x.r.spin, time.Duration(x.r.spinW), x.r.other, time.Duration(x.r.otherW), x.r.st.AchievedHz, x.r.spinCPU)
	}
	if cpu.st.IdleSkips == 0 {
		t.Errorf("no idle thread-ticks skipped with %d parked threads", parked)
	}
	// Parked threads never run: suspensions per round are about the
	// threads that ran (the spinner, the runtime's busy ones), not all.
	perRound := func(r result) float64 { return float64(r.st.Suspensions) / (r.st.TickHz * r.secs) }
	if perRound(cpu) >= perRound(wall)/2 {
		t.Errorf("on CPU: %.2f suspensions per round, every thread: %.2f; want under half", perRound(cpu), perRound(wall))
	}
	// The share is of CPU time, as the samples' weights give it and as a
	// user reads it (pprof's cpu sample type): a runtime thread that ran a
	// microsecond since the last tick is one sample but no CPU, and on a
	// loaded host such wake-ups make up a varying part of the count.
	if cpu.spin == 0 || cpu.spinW*10 < (cpu.spinW+cpu.otherW)*7 {
		t.Errorf("on CPU: the spinning thread has %v of %v CPU in samples (%d of %d samples), want ≥ 70%%",
			time.Duration(cpu.spinW), time.Duration(cpu.spinW+cpu.otherW), cpu.spin, cpu.spin+cpu.other)
	}
	// The spinning thread's weights add up to the CPU time it used while
	// sampled, whatever the host gave it. They differ by a quantum (10 ms
	// under Wine, 15.6 ms on Windows) at each end, and miss what it used
	// after the last round that saw its time advance: up to a quantum and
	// a round (a round under Wine at load 15 takes up to ~30 ms). Open
	// takes the thread's baseline before c0 is read: what it ran in
	// between (a quantum, when the host schedules it there) is in the
	// weights and not in spinCPU.
	if d := time.Duration(cpu.spinW) - cpu.spinCPU; cpu.spinCPU == 0 || d > 2*cpuQuantum || d < -4*cpuQuantum {
		t.Errorf("on CPU: the spinning thread's samples weigh %v; it used %v", time.Duration(cpu.spinW), cpu.spinCPU)
	}
}

// TestOffCPUParked launches the fixture whose four threads name themselves
// and park in worker → outer → middle → leaf_wait, samples it with OffCPU
// for two seconds, and checks that each parked thread is reported by name
// with off-CPU samples worth the time it was sampled, all with the same
// stack, taken with one suspension per wait.
func TestOffCPUParked(t *testing.T) {
	exe := os.Getenv("RAWSTACK_WINE_THREADS")
	if exe == "" {
		t.Skip("RAWSTACK_WINE_THREADS not set: the C fixture is built by the Linux side (wine_test.go)")
	}
	// Not in t.TempDir: Wine refuses to unlink a file the fixture had open.
	pidfile := filepath.Join(os.TempDir(), fmt.Sprintf("rawstack-offcpu-%d.pid", os.Getpid()))
	defer os.Remove(pidfile)
	cmd := exec.Command(exe, "4", "30", pidfile)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(pidfile); strings.HasSuffix(string(b), "\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("threads.exe wrote no pid")
		}
	}
	c := newCollector()
	began := time.Now() // waits count from when the session sees the threads, in Open
	s, err := Open(platform.Config{Pid: cmd.Process.Pid, Frequency: 100, OffCPU: true}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	secs := time.Since(began).Seconds()
	st := s.Stats()
	parked := map[uint32]string{}
	for tid, n := range c.names {
		if strings.HasPrefix(n, "parked-") {
			parked[tid] = n
		}
	}
	if len(parked) != 4 {
		t.Fatalf("thread names %v: want parked-0..3", c.names)
	}
	off := map[uint32]time.Duration{}
	stacks := map[uint32]map[string]bool{}
	seen := map[uint32]bool{}
	for _, smp := range c.samples {
		if _, ok := parked[smp.Tid]; !ok {
			continue
		}
		first := !seen[smp.Tid]
		seen[smp.Tid] = true
		if smp.Flags&format.SampleOffCPU == 0 {
			if first {
				// The CPU time of the thread's last steps into its
				// wait can be accounted after the session's first
				// reading of it (Wine, CI: once in five runs).
				t.Logf("parked thread %d: its first sample is on CPU", smp.Tid)
				continue
			}
			t.Errorf("parked thread %d has an on-CPU sample after its first", smp.Tid)
			continue
		}
		off[smp.Tid] += time.Duration(smp.Weight)
		if stacks[smp.Tid] == nil {
			stacks[smp.Tid] = map[string]bool{}
		}
		var b strings.Builder
		for _, pc := range smp.PCs {
			if m := c.module(pc); m != nil && strings.HasSuffix(strings.ToLower(m.Path), "threads.exe") {
				b.WriteString(" exe")
			} else {
				b.WriteString(" other")
			}
		}
		stacks[smp.Tid][b.String()] = true
	}
	t.Logf("%.1fs: %d suspensions, %d idle thread-ticks skipped; off CPU: %v; stacks: %v", secs, st.Suspensions, st.IdleSkips, off, stacks)
	for tid, name := range parked {
		if d := off[tid].Seconds(); d < secs-0.3 || d > secs+0.05 {
			t.Errorf("%s (%d): %v off CPU in %.2fs sampled", name, tid, off[tid], secs)
		}
		if len(stacks[tid]) != 1 {
			t.Errorf("%s (%d): stacks %v, want the one it waits in", name, tid, stacks[tid])
		}
		for k := range stacks[tid] {
			if strings.Count(k, "exe") < 4 {
				t.Errorf("%s (%d): stack %q has not the four frames of threads.exe", name, tid, k)
			}
		}
	}
	if st.Suspensions > 4*uint64(len(c.threads)) {
		t.Errorf("%d suspensions for %d threads that wait: want about one per wait", st.Suspensions, len(c.threads))
	}
}
