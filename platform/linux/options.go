package linux

import (
	"fmt"
	"runtime"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/allocshim"
)

// maxBPFStack is what the eBPF back end copies at most per sample
// (MAX_STACK of platform/linux/ebpf/bpf/rawstack.bpf.c, bpfMaxStack there).
const maxBPFStack = 16384

// checkConfig returns a *platform.OptionError for the first option of cfg
// the back end it names (perf_event or eBPF) does not implement.
func checkConfig(cfg platform.Config) error {
	be := cfg.Backend.String()
	bad := func(option, reason string) error {
		return &platform.OptionError{Option: option, Backend: be, OS: "linux", Reason: reason}
	}
	switch cfg.Backend {
	case platform.BackendPerf:
		switch {
		case cfg.System:
			return bad("System", "whole-system sampling needs Backend ebpf")
		case cfg.OffCPU:
			return bad("OffCPU", "off-CPU samples need Backend ebpf")
		case cfg.Alloc && !allocshim.Built:
			return bad("Alloc", "the allocation sampler is built for x86-64 and arm64 only; on "+runtime.GOARCH+" Backend ebpf records allocations with uprobes")
		case cfg.AllocRate < 0 || cfg.AllocRate != 0 && !cfg.Alloc:
			return bad("AllocRate", fmt.Sprintf("a sampling interval of %d bytes needs Alloc and a positive rate", cfg.AllocRate))
		}
	case platform.BackendEBPF:
		switch {
		case cfg.KeepRaw:
			return bad("KeepRaw", "the eBPF back end unwinds on the host")
		case cfg.Goroutines:
			return bad("Goroutines", "goroutine ids and labels are read with Backend perf")
		case cfg.AllocRate < 0 || cfg.AllocRate != 0 && !cfg.Alloc:
			return bad("AllocRate", fmt.Sprintf("a sampling interval of %d bytes needs Alloc and a positive rate", cfg.AllocRate))
		case cfg.Unwind != platform.UnwindFP && cfg.StackSize > maxBPFStack:
			return bad("StackSize", fmt.Sprintf("the eBPF back end copies at most %d bytes of stack per sample (asked for %d)", maxBPFStack, cfg.StackSize))
		}
	default:
		return bad("Backend", "unknown back end")
	}
	return nil
}
