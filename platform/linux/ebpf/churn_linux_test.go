//go:build linux && (amd64 || arm64)

package ebpf_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/ebpf"
)

// TestWholeHostChurnState is the agent's memory bound as a count, not a
// timing: a whole-host session (what `rawstack agent` runs) sees
// thousands of short-lived processes start, exec, get sampled and exit,
// and afterwards holds per-process state (processes, unwind views,
// watched perf maps) for about the processes alive then, not for every
// process it has seen.
func TestWholeHostChurnState(t *testing.T) {
	needBPF(t)
	const n = 3000
	s, err := ebpf.Open(platform.Config{Backend: platform.BackendEBPF, System: true, Unwind: platform.UnwindDWARF, Frequency: 999}, countHandler{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	// Two at a time: /bin/true, and a shell that spins a little, so that
	// some of them are sampled (their unwind views and perf maps made).
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := 0
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < n/2; i++ {
				cmd := exec.Command("/bin/true")
				if i%2 == 1 {
					cmd = exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 200 ]; do i=$((i+1)); done")
				}
				if err := cmd.Run(); err == nil {
					mu.Lock()
					ran++
					mu.Unlock()
				}
			}
		}(w)
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // the exits' records read
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	sz := s.StateSizes()
	live := liveProcesses(t)
	t.Logf("%d processes run, %d samples; afterwards %d processes alive, state %+v; stats %+v", ran, st.Samples, live, sz, st)
	if ran < n*9/10 {
		t.Fatalf("only %d of %d processes ran", ran, n)
	}
	// Slack: processes that started or exited while this counted.
	bound := live + 64
	if sz.Procs > bound || sz.JITProcs > bound || sz.UnwindProcs > 2*bound+16 {
		t.Fatalf("after %d short-lived processes the session holds state for %+v; %d processes are alive", ran, sz, live)
	}
}

// liveProcesses counts the processes in /proc.
func liveProcesses(t *testing.T) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}
