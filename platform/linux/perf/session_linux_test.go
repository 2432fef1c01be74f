//go:build linux

package perf

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/internal/linuxtest"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

func needPerf(t *testing.T) {
	t.Helper()
	testbuild.Feature(t, Probe())
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
// expects the overflow to come back as Lost counts, not silence. 1000 Hz
// fills the page within 40 ms; at 4000 Hz Debian's arm64 kernel under
// qemu's emulation (the arm64 suite) locked up in the timer's interrupts
// once and oopsed when the event was closed.
func TestRingOverflowIsLost(t *testing.T) {
	needPerf(t)
	h := &linuxtest.CountHandler{}
	s, err := Open(platform.Config{Frequency: 1000, RingPages: 1}, h)
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

// TestKernelFrames checks that where the kernel permits kernel frames,
// the session takes them and samples taken in the kernel carry them, leaf
// first, with the SampleKernel flag. Whether they are permitted is asked of
// the kernel itself (a sampling event without exclude_kernel), not of the
// session under test.
func TestKernelFrames(t *testing.T) {
	needPerf(t)
	kernelFramesPermitted(t)
	h := &linuxtest.CountHandler{Strict: true}
	s, err := Open(platform.Config{Frequency: 999}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.KernelFrames() {
		t.Fatal("the kernel permits kernel frames (a cpu-clock event without exclude_kernel opened), but the session does not take them")
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

// kernelFramesPermitted opens a sampling cpu-clock event on this process
// with exclude_kernel clear and a kernel callchain, as the kernel decides
// it (kernel.perf_event_paranoid<=1, or CAP_PERFMON); where the kernel
// refuses, the prerequisite is missing (testbuild.Skip).
func kernelFramesPermitted(t *testing.T) {
	t.Helper()
	attr := sys.PerfEventAttr{
		Type:        sys.PerfTypeSoftware,
		Config:      sys.PerfCountSWCPUClock,
		Sample:      99,
		Sample_type: sys.PerfSampleCallchain,
		Bits:        sys.PerfBitDisabled | sys.PerfBitFreq,
	}
	fd, err := sys.PerfEventOpen(&attr, 0, -1, -1)
	if errors.Is(err, sys.EACCES) || errors.Is(err, sys.EPERM) {
		paranoid, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
		testbuild.Skip(t, "the kernel refuses kernel frames (%v): kernel.perf_event_paranoid=%s needs to be <=1, or CAP_PERFMON", err, strings.TrimSpace(string(paranoid)))
	}
	if err != nil {
		t.Fatalf("perf_event_open of a cpu-clock event with kernel frames: %v", err)
	}
	sys.Close(fd)
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
