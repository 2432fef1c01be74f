// Package pprof exports a symbolized profile in pprof's protocol buffer
// format (github.com/google/pprof/profile), readable by go tool pprof.
//
// Sample values are the sample count and the on-CPU nanoseconds; each
// module mapping becomes a pprof Mapping carrying the build id; each
// location lists its inlined frames innermost first, as pprof expects.
// Locations nothing is known about get one line naming "module+0xoff"
// (or "0xaddr"), so that no address is hidden in a report.
package pprof

import (
	"io"
	"strings"

	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
)

// Convert builds the pprof profile of p.
func Convert(p *symbolizer.Profile) *profile.Profile {
	out := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
	}
	if p.End > p.Start {
		out.DurationNanos = p.End - p.Start
	}
	var count, cpu int64
	for _, s := range p.Samples {
		count += s.Count
		cpu += s.CPUNanos
	}
	if count > 0 {
		out.Period = cpu / count
	}
	maps := map[*symbolizer.Module]*profile.Mapping{}
	for _, m := range mainFirst(p.Modules) {
		pm := &profile.Mapping{
			ID:              uint64(len(out.Mapping) + 1),
			Start:           m.Base,
			Limit:           m.Base + m.Size,
			Offset:          m.FileOffset,
			File:            m.Name(),
			BuildID:         m.BuildIDHex(),
			HasFunctions:    true,
			HasFilenames:    true,
			HasLineNumbers:  true,
			HasInlineFrames: true,
		}
		if pm.BuildID == "" {
			pm.BuildID = m.GoBuildID
		}
		maps[m] = pm
		out.Mapping = append(out.Mapping, pm)
	}
	type fnKey struct{ name, file string }
	funcs := map[fnKey]*profile.Function{}
	fn := func(name, file string) *profile.Function {
		k := fnKey{name, file}
		if f := funcs[k]; f != nil {
			return f
		}
		f := &profile.Function{ID: uint64(len(out.Function) + 1), Name: name, SystemName: name, Filename: file}
		funcs[k] = f
		out.Function = append(out.Function, f)
		return f
	}
	locs := make([]*profile.Location, len(p.Locations))
	for i, l := range p.Locations {
		pl := &profile.Location{ID: uint64(i + 1), Address: l.Abs}
		if l.Module != nil {
			pl.Mapping = maps[l.Module]
		}
		if len(l.Frames) == 0 {
			pl.Line = []profile.Line{{Function: fn(l.String(), "")}}
		}
		for j, f := range l.Frames {
			pl.Line = append(pl.Line, profile.Line{Function: fn(l.FunctionName(j), f.File), Line: int64(f.Line), Column: int64(f.Column)})
		}
		locs[i] = pl
		out.Location = append(out.Location, pl)
	}
	for _, s := range p.Samples {
		ps := &profile.Sample{Value: []int64{s.Count, s.CPUNanos}}
		// pprof labels as string labels (go tool pprof -tagfocus
		// key=value), the goroutine as a numeric one, as Go's own
		// profiles label samples.
		for _, l := range s.Labels {
			if ps.Label == nil {
				ps.Label = map[string][]string{}
			}
			ps.Label[l.Key] = append(ps.Label[l.Key], l.Value)
		}
		if s.Goroutine != 0 {
			ps.NumLabel = map[string][]int64{"goroutine": {int64(s.Goroutine)}}
		}
		for _, li := range s.Locs {
			ps.Location = append(ps.Location, locs[li])
		}
		out.Sample = append(out.Sample, ps)
	}
	return out
}

// Write writes p as a gzipped pprof profile.
func Write(w io.Writer, p *symbolizer.Profile) error {
	return Convert(p).Write(w)
}

// mainFirst orders modules so that the main executable comes first: pprof
// takes the first mapping as the profiled program. It is the first ELF or
// PE module that is not a shared library, else the first module.
func mainFirst(mods []*symbolizer.Module) []*symbolizer.Module {
	best := -1
	for i, m := range mods {
		if m.Kind != format.ModuleELF && m.Kind != format.ModulePE {
			continue
		}
		base := strings.ToLower(m.Path[strings.LastIndexAny(m.Path, "/\\")+1:])
		if strings.Contains(base, ".so") || strings.HasSuffix(base, ".dll") {
			continue
		}
		best = i
		break
	}
	if best <= 0 {
		return mods
	}
	out := make([]*symbolizer.Module, 0, len(mods))
	out = append(out, mods[best])
	out = append(out, mods[:best]...)
	return append(out, mods[best+1:]...)
}
