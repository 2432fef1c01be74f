//go:build linux

package linux

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/internal/linuxtest"
	"github.com/rawstack/rawstack/platform/linux/perf"
)

// TestOpenDispatch: without package ebpf linked in (this test does not
// import it), the eBPF back end says so with an error wrapping
// ErrNotSupported, from Open, Launch and ProbeBPF alike; the default back
// end is the perf one and samples.
func TestOpenDispatch(t *testing.T) {
	if BPFLinked() {
		t.Fatal("BPFLinked without package platform/linux/ebpf imported")
	}
	for name, err := range map[string]error{
		"ProbeBPF": ProbeBPF(),
		"Open":     second(Open(platform.Config{Backend: platform.BackendEBPF}, &linuxtest.CountHandler{})),
		"Launch":   second(Launch(nil, platform.Config{Backend: platform.BackendEBPF}, &linuxtest.CountHandler{})),
	} {
		if !errors.Is(err, platform.ErrNotSupported) {
			t.Errorf("%s of the eBPF back end, not linked in: %v", name, err)
		}
	}
	testbuild.Feature(t, Probe())
	h := &linuxtest.CountHandler{}
	s, err := Open(platform.Config{Frequency: 999}, h)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*perf.Session); !ok {
		t.Errorf("Open with the default back end returned a %T", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
		}
	}()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if h.Modules == 0 || h.Threads == 0 {
		t.Errorf("the perf session reported %d modules and %d threads of this process", h.Modules, h.Threads)
	}
}

func second(_ Session, err error) error { return err }
