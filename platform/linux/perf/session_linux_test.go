//go:build linux

package perf

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/internal/linuxtest"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

func needPerf(t *testing.T) {
	t.Helper()
	if err := Probe(); err != nil {
		if errors.Is(err, platform.ErrNotSupported) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
}

func burn(d time.Duration) uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	x := uint64(1)
	for end := sys.ThreadCPUTime() + int64(d); sys.ThreadCPUTime() < end; {
		for i := 0; i < 1000000; i++ {
			x = x*6364136223846793005 + uint64(i)
		}
	}
	return x
}

// TestRingOverflowIsLost leaves a one-page ring unread while sampling and
// expects the overflow to come back as Lost counts, not silence.
func TestRingOverflowIsLost(t *testing.T) {
	needPerf(t)
	h := &linuxtest.CountHandler{}
	s, err := Open(platform.Config{Frequency: 4000, RingPages: 1}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	burn(400 * time.Millisecond)
	s.ReadAll()
	burn(50 * time.Millisecond) // the kernel reports the loss once there is room again
	s.ReadAll()
	t.Logf("%d samples, %d lost, stats %+v", h.Samples, h.NLost, s.Stats())
	if h.NLost == 0 {
		t.Errorf("no Lost count after overflowing a one-page ring (%d samples read)", h.Samples)
	}
	if st := s.Stats(); st.Lost != h.NLost || st.Samples != uint64(h.Samples) {
		t.Errorf("stats %+v disagree with the handler (%d samples, %d lost)", st, h.Samples, h.NLost)
	}
}

// TestKernelFrames checks that where kernel frames are permitted, samples
// taken in the kernel carry them, leaf first, with the SampleKernel flag.
func TestKernelFrames(t *testing.T) {
	needPerf(t)
	h := &linuxtest.CountHandler{Strict: true}
	s, err := Open(platform.Config{Frequency: 999}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.KernelFrames() {
		t.Skip("kernel frames not permitted here (needs CAP_PERFMON or kernel.perf_event_paranoid<=1)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	// getpid in a loop: most of the time is spent entering the kernel.
	runtime.LockOSThread()
	for end := sys.ThreadCPUTime() + int64(300*time.Millisecond); sys.ThreadCPUTime() < end; {
		for i := 0; i < 1000; i++ {
			sys.Gettid()
		}
	}
	runtime.UnlockOSThread()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d samples, %d in the kernel", h.Samples, h.Kernel)
	if h.Kernel == 0 {
		t.Error("no kernel samples while looping on gettid")
	}
}

func TestOpenErrors(t *testing.T) {
	needPerf(t)
	if _, err := Open(platform.Config{Pid: 1 << 30}, &linuxtest.CountHandler{}); err == nil || !strings.Contains(err.Error(), "no such process") {
		t.Errorf("Open of a missing pid: %v", err)
	}
	s := &Session{tracking.New(platform.Config{}, nil)}
	s.SetTarget(4242, false)
	err := s.openError(sys.EACCES, 4243, 3, false)
	var pe *platform.PermissionError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "perf_event_paranoid<=2 (it is 3)") || !strings.Contains(err.Error(), "pid 4242") {
		t.Errorf("paranoid=3 error: %v", err)
	}
	err = s.openError(sys.EPERM, 4243, 2, false)
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "ptrace") {
		t.Errorf("other-user error: %v", err)
	}
}
