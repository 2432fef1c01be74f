package main

import (
	"fmt"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
)

// jitHint returns advice for a profile whose samples mostly end in
// anonymous executable memory that no JIT event names: the code of a JIT
// runtime that was not asked to publish its names. "" when there is none.
func jitHint(p *symbolizer.Profile) string {
	var total, anon int64
	for _, s := range p.Samples {
		total += s.Count
		if len(s.Locs) == 0 {
			continue
		}
		l := p.Locations[s.Locs[0]]
		if len(l.Frames) == 0 && (l.Module == nil || l.Module.Kind == format.ModuleAnon) {
			anon += s.Count
		}
	}
	if total == 0 || anon*10 < total {
		return ""
	}
	return fmt.Sprintf("rawstack report: %.0f%% of the samples are in anonymous code with no name: JIT-compiled code? "+
		"Record the runtime with its profiler maps on: node --perf-basic-prof (or --perf-prof), "+
		"java -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit -XX:+PreserveFramePointer, "+
		"python3.12 -X perf (with --unwind dwarf), DOTNET_PerfMapEnabled=1", float64(anon)*100/float64(total))
}
