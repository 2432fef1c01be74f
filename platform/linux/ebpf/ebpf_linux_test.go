//go:build linux && (amd64 || arm64)

package ebpf_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux"
	"github.com/rawstack/rawstack/platform/linux/ebpf"
)

func needBPF(t *testing.T) {
	t.Helper()
	testbuild.Feature(t, linux.ProbeBPF())
}

// countHandler ignores events: the test reads the session's totals.
type countHandler struct{}

func (countHandler) Process(*format.Process)           {}
func (countHandler) ProcessEnd(*format.ProcessEnd)     {}
func (countHandler) ThreadStart(*format.ThreadStart)   {}
func (countHandler) ThreadName(*format.ThreadName)     {}
func (countHandler) ThreadEnd(*format.ThreadEnd)       {}
func (countHandler) ModuleLoad(*format.ModuleLoad)     {}
func (countHandler) ModuleUnload(*format.ModuleUnload) {}
func (countHandler) Sample(*platform.Sample)           {}
func (countHandler) Lost(*format.Lost)                 {}

// TestBPFBytesPerSample measures what each way of taking user stacks
// moves through the BPF ring buffer per sample, for the package doc: the
// frame-pointer walk (a few return addresses) against registers plus a
// stack window (kB). It records the tracer's chain.c, built with frame
// pointers, so both ways see its whole chain.
func TestBPFBytesPerSample(t *testing.T) {
	needBPF(t)
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-fno-omit-frame-pointer", "-o", "{dir}/chain", "{in0}"},
		Inputs: []string{"../../../tracer/testdata/chain.c"},
		Out:    "chain",
	})
	for _, c := range []struct {
		mode  platform.UnwindMode
		stack int
	}{{platform.UnwindFP, 0}, {platform.UnwindDWARF, 4096}, {platform.UnwindDWARF, 8192}} {
		h := &countHandler{}
		s, err := ebpf.Launch(exec.Command(bin, "0.3"), platform.Config{Backend: platform.BackendEBPF, Unwind: c.mode, StackSize: c.stack, Frequency: 999}, h)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s.Run(ctx)
		cancel()
		s.Close()
		st := s.Stats()
		if st.Samples < 50 {
			t.Fatalf("%v: only %d samples", c.mode, st.Samples)
		}
		t.Logf("%v, stack window %d: %d samples, %.0f bytes per sample through the BPF ring", c.mode, c.stack, st.Samples, float64(s.BPFRingBytes())/float64(st.Samples))
	}
}
