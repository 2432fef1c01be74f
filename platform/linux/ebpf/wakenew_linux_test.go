//go:build linux && (amd64 || arm64)

package ebpf_test

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
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

// TestWholeHostNewProcessWakes: a whole-host session reads its rings
// about once a second, but the first sample of a process wakes it at
// once, so that a process that lives a fraction of that second is still
// in /proc when its attributes are read: here a shell that spins for
// 0.3 s is reported with its command line. Read a second late, it would
// be reported with none.
func TestWholeHostNewProcessWakes(t *testing.T) {
	needBPF(t)
	h := &cmdlineHandler{cmdlines: map[uint32]string{}}
	s, err := ebpf.Open(platform.Config{Backend: platform.BackendEBPF, System: true, Frequency: 999}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.PollInterval < 500*time.Millisecond {
		t.Fatalf("whole-host PollInterval %v: the test needs one longer than the spinner's life", s.PollInterval)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

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
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
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
