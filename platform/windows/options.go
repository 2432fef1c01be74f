package windows

import "github.com/rawstack/rawstack/platform"

// checkConfig returns a *platform.OptionError for the first option of cfg
// the suspend-and-copy sampler does not implement. It honours Pid,
// Frequency, StackSize and OffCPU (waits seen through the threads' CPU
// times, their stacks taken once per wait); NoKernel and NoJIT hold by construction (it
// reads no kernel frames and no JIT maps), and so does NoPython (it reads no
// Python frames); every Unwind mode unwinds with
// the modules' x64 unwind data (.pdata/.xdata), the one mechanism it has.
func checkConfig(cfg platform.Config) error {
	bad := func(option, reason string) error {
		return &platform.OptionError{Option: option, Backend: "suspend-and-copy", OS: "windows", Reason: reason}
	}
	switch {
	case cfg.Backend != platform.BackendPerf:
		return bad("Backend", "Windows has one back end; "+cfg.Backend.String()+" is Linux's")
	case cfg.System:
		return bad("System", "whole-system sampling needs ETW (docs/windows-etw.md), which is not implemented")
	case cfg.KeepRaw:
		return bad("KeepRaw", "samples are unwound on the host; raw stack copies are not written")
	case cfg.Goroutines:
		return bad("Goroutines", "goroutine ids and labels are read on Linux only")
	case cfg.JITCodeBytes:
		return bad("JITCodeBytes", "JIT perf maps and jitdump files are Linux's")
	case cfg.RingPages != 0:
		return bad("RingPages", "the sampler has no ring buffers")
	case cfg.Alloc:
		return bad("Alloc", "native allocations are recorded on Linux (an ELF allocation sampler, preloaded or injected, or eBPF uprobes)")
	case cfg.AllocRate != 0:
		return bad("AllocRate", "native allocations are recorded on Linux (an ELF allocation sampler, preloaded or injected, or eBPF uprobes)")
	}
	// BuildIDCache, BuildIDCacheMax and NoBuildIDCache are honoured by
	// having nothing to copy: the cache keeps files of other mount
	// namespaces, and a Windows process (or one under Wine) maps its
	// images from the file system the recorder sees.
	return nil
}
