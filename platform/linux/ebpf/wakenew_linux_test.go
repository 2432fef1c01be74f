//go:build linux && (amd64 || arm64)

package ebpf_test

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/ebpf"
)

// cmdlineHandler keeps the command line each process is reported with.
type cmdlineHandler struct {
	countHandler
	mu       sync.Mutex
	cmdlines map[uint32]string
}

func (h *cmdlineHandler) Process(p *format.Process) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.Cmdline != "" {
		h.cmdlines[p.Pid] = p.Cmdline
	}
}

// startWholeHost runs a whole-host eBPF session of cfg into h until the
// returned stop is called, and fails the test unless the session reads
// its rings seldom enough for the test (why, in the failure's words).
func startWholeHost(t *testing.T, cfg platform.Config, h platform.Handler, why string) (stop func()) {
	t.Helper()
	cfg.Backend, cfg.System = platform.BackendEBPF, true
	s, err := ebpf.Open(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.PollInterval < 500*time.Millisecond {
		t.Fatalf("whole-host PollInterval %v: the test needs one %s", s.PollInterval, why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestWholeHostNewProcessWakes: a whole-host session reads its rings
// about once a second, but the first sample of a process wakes it at
// once, so that a process that lives a fraction of that second is still
// in /proc when its attributes are read: here a shell that spins for
// 0.3 s is reported with its command line. Read a second late, it would
// be reported with none.
func TestWholeHostNewProcessWakes(t *testing.T) {
	needBPF(t)
	h := &cmdlineHandler{cmdlines: map[uint32]string{}}
	stop := startWholeHost(t, platform.Config{Frequency: 999}, h, "longer than the spinner's life")

	const marker = "rawstack-wake-new"
	var pids []int
	for i := 0; i < 3; i++ {
		cmd := exec.Command("timeout", "0.3", "sh", "-c", "while :; do :; done # "+marker)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
		cmd.Wait()
	}
	stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	named := 0
	for _, cl := range h.cmdlines {
		if strings.HasPrefix(cl, "sh\x00") && strings.Contains(cl, marker) {
			named++
		}
	}
	t.Logf("%d of %d spinners (children of timeout %v) reported with their command line", named, len(pids), pids)
	if named < 2 {
		t.Fatalf("only %d of %d shells that spun 0.3 s were reported with their command line", named, len(pids))
	}
}

// delayHandler keeps how long after it was taken each sample of a
// process was handed to it.
type delayHandler struct {
	countHandler
	mu     sync.Mutex
	delays map[uint32][]time.Duration
}

func (h *delayHandler) Sample(sm *platform.Sample) {
	d := time.Duration(sys.Monotonic() - sm.Time)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.delays[sm.Pid] = append(h.delays[sm.Pid], d)
}

// TestWholeHostV8Wakes: a whole-host session reads its rings about once
// a second, and names a node process's JavaScript frames from V8's heap
// as the heap is when it reads the sample, by which time V8 has replaced
// some of the code sampled. So a sample of a process that runs V8 wakes
// the reader (at most every 100 ms across the host): the samples of a busy
// node are read a median of under 150 ms after they were taken, where the
// once-a-second reads leave them about half a second.
func TestWholeHostV8Wakes(t *testing.T) {
	needBPF(t)
	node := testbuild.Need(t, "node", "the test samples node")
	h := &delayHandler{delays: map[uint32][]time.Duration{}}
	stop := startWholeHost(t, platform.Config{Frequency: 99, Unwind: platform.UnwindAuto}, h, "much longer than the wakeups' 100 ms")
	cmd := exec.Command(node, "-e", "const end = Date.now() + 2500; let s = 0; while (Date.now() < end) s += Math.sqrt(s + 1);")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node: %v: %s", err, out)
	}
	time.Sleep(100 * time.Millisecond)
	stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	ds := h.delays[uint32(cmd.Process.Pid)]
	if len(ds) < 50 {
		t.Fatalf("%d samples of node (pid %d), want about 250", len(ds), cmd.Process.Pid)
	}
	slices.Sort(ds)
	med := ds[len(ds)/2]
	t.Logf("%d samples of node read %v after they were taken (median; 90th percentile %v)", len(ds), med, ds[len(ds)*9/10])
	if med > 150*time.Millisecond {
		t.Errorf("node's samples were read a median of %v after they were taken, want < 150 ms", med)
	}
}
