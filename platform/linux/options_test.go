package linux

import (
	"testing"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/internal/optiontest"
)

func TestCheckConfig(t *testing.T) {
	t.Run("perf", func(t *testing.T) {
		optiontest.Check(t, checkConfig, platform.Config{},
			"Pid", "Frequency", "NoKernel", "RingPages", "Unwind", "StackSize", "KeepRaw",
			"NoJIT", "JITCodeBytes", "Goroutines", "Alloc", "NoPython", "SampleG",
			"BuildIDCache", "BuildIDCacheMax", "NoBuildIDCache",
			"Backend") // Backend+1 is ebpf, the other back end
	})
	t.Run("ebpf", func(t *testing.T) {
		optiontest.Check(t, checkConfig, platform.Config{Backend: platform.BackendEBPF},
			"Pid", "Frequency", "NoKernel", "RingPages", "Unwind", "StackSize",
			"System", "OffCPU", "NoJIT", "JITCodeBytes", "Alloc", "NoPython", "SampleG",
			"BuildIDCache", "BuildIDCacheMax", "NoBuildIDCache")
	})
	// AllocRate is honoured with Alloc, by both.
	for _, be := range []platform.Backend{platform.BackendPerf, platform.BackendEBPF} {
		if err := checkConfig(platform.Config{Backend: be, Alloc: true, AllocRate: 4096}); err != nil {
			t.Errorf("%v: Alloc with AllocRate 4096: %v", be, err)
		}
	}
	big := platform.Config{Backend: platform.BackendEBPF, Unwind: platform.UnwindDWARF, StackSize: maxBPFStack + 8}
	if err := checkConfig(big); err == nil {
		t.Errorf("%+v accepted: the BPF program copies at most %d bytes", big, maxBPFStack)
	}
}
