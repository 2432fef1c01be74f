package tracer

import "github.com/rawstack/rawstack/platform"

// config is the one place Options become the back end's platform.Config:
// every OS's back end gets the same struct, validates it and returns a
// *platform.OptionError for a field it cannot honour, instead of the
// field being left out on the way.
func (o *Options) config() platform.Config {
	return platform.Config{Pid: o.Pid, Frequency: o.Frequency, NoKernel: o.NoKernel,
		Unwind: o.Unwind, StackSize: o.StackSize, KeepRaw: o.KeepRaw,
		Backend: o.Backend, System: o.System, OffCPU: o.OffCPU,
		NoJIT: o.NoJIT, JITCodeBytes: o.JITCodeBytes, Goroutines: o.Goroutines,
		Alloc: o.Alloc, AllocRate: o.AllocRate, NoPython: o.NoPython,
		BuildIDCache: o.BuildIDCache, BuildIDCacheMax: o.BuildIDCacheMax, NoBuildIDCache: o.NoBuildIDCache,
		// The own process's samples carry their goroutine's g: linked
		// spans follow goroutines (spanlink.go).
		SampleG: o.Pid == 0 && o.Command == nil && !o.System}
}
