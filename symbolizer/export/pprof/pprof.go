// Package pprof exports a symbolized profile in pprof's protocol buffer
// format (profile.proto of github.com/google/pprof), readable by go tool
// pprof.
//
// Sample values are the sample count and the on-CPU nanoseconds (the
// default view), and the off-CPU nanoseconds when the profile has off-CPU
// samples (format/SPEC.md §6.10; a profile whose on-CPU samples all weigh
// 1 has counts only), and when the trace has allocation samples
// (format/SPEC.md §6.22) alloc_objects, alloc_space, inuse_objects and
// inuse_space, the types of runtime/pprof's heap profile (the default
// view stays cpu beside CPU samples; a heap-only profile shows
// inuse_space, as Go's does); each
// module mapping becomes a pprof Mapping carrying the build id; each
// location lists its inlined frames innermost first, as pprof expects.
// Locations nothing is known about get one line naming "module+0xoff"
// (or "0xaddr"), so that no address is hidden in a report.
package pprof

import (
	"compress/gzip"
	"io"
	"strings"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
)

// Write writes p as a gzipped pprof profile (profile.proto of
// github.com/google/pprof). The encoder is this package's own: pprof's
// profile package compiles a dozen regular expressions when a program
// starts, which every rawstack command paid whether it wrote pprof or not.
func Write(w io.Writer, p *symbolizer.Profile) error {
	zw := gzip.NewWriter(w)
	if _, err := zw.Write(Encode(nil, p)); err != nil {
		return err
	}
	return zw.Close()
}

// Encode appends p's uncompressed profile.proto message to b.
func Encode(b []byte, p *symbolizer.Profile) []byte { return encode(b, p, 0) }

// encode is Encode; with bucket > 0 the samples come from p's timeline,
// split by thread and time bucket and labelled (timeline.go).
func encode(b []byte, p *symbolizer.Profile, bucket int64) []byte {
	e := &encoder{strs: map[string]int64{"": 0}, strTab: []string{""}}
	var count, cpu, off int64
	for _, s := range p.Samples {
		count += s.Count
		cpu += s.CPUNanos
		off += s.OffCPUNanos
	}
	// The values: samples/count, cpu/nanoseconds (the time on CPU, the
	// default view: go tool pprof's "Total samples = 3s"), and
	// off_cpu/nanoseconds only when the profile has off-CPU time. An
	// Unweighted profile (format/SPEC.md §6.10: its on-CPU weights are
	// counts) has no cpu value. cols picks them from [count, cpu, off].
	var m, lb enc
	m.msg(&e.b, fProfileSampleType, valueType(e, "samples", "count"))
	cols := []int{0}
	if !p.Unweighted {
		m.msg(&e.b, fProfileSampleType, valueType(e, "cpu", "nanoseconds"))
		cols = append(cols, 1)
	}
	if off > 0 {
		m.msg(&e.b, fProfileSampleType, valueType(e, "off_cpu", "nanoseconds"))
		cols = append(cols, 2)
	}
	// Allocation samples (format/SPEC.md §6.22) add the four values of a
	// Go heap profile, in runtime/pprof's order, so go tool pprof's
	// -sample_index=alloc_space (…) work as on a heap profile. The
	// timeline view has no memory figures.
	memory := p.Memory && !(bucket > 0 && p.Timeline != nil)
	if memory {
		m.msg(&e.b, fProfileSampleType, valueType(e, "alloc_objects", "count"))
		m.msg(&e.b, fProfileSampleType, valueType(e, "alloc_space", "bytes"))
		m.msg(&e.b, fProfileSampleType, valueType(e, "inuse_objects", "count"))
		m.msg(&e.b, fProfileSampleType, valueType(e, "inuse_space", "bytes"))
		cols = append(cols, 3, 4, 5, 6)
	}
	if bucket > 0 && p.Timeline != nil {
		timelineSamples(e, p.Timeline, bucket, cols)
	}
	for _, s := range p.Samples {
		if bucket > 0 && p.Timeline != nil {
			break
		}
		m.b = m.b[:0]
		m.packed(fSampleLocation, len(s.Locs), func(i int) uint64 { return uint64(s.Locs[i]) + 1 })
		vals := [...]int64{s.Count, s.CPUNanos, s.OffCPUNanos, s.AllocObjects, s.AllocBytes, s.InuseObjects, s.InuseBytes}
		m.packed(fSampleValue, len(cols), func(i int) uint64 { return uint64(max(vals[cols[i]], 0)) })
		// A goroutine's pprof labels as string labels (go tool pprof
		// -tagfocus key=value), the goroutine as a numeric one.
		for _, l := range s.Labels {
			lb.b = lb.b[:0]
			lb.uint(fLabelKey, uint64(e.str(l.Key)))
			lb.uint(fLabelStr, uint64(e.str(l.Value)))
			m.msg(&m, fSampleLabel, lb.b)
		}
		if s.Goroutine != 0 {
			lb.b = lb.b[:0]
			lb.uint(fLabelKey, uint64(e.str("goroutine")))
			lb.uint(fLabelNum, s.Goroutine)
			m.msg(&m, fSampleLabel, lb.b)
		}
		e.b.msg(&e.b, fProfileSample, m.b)
	}
	mapID := map[*symbolizer.Module]uint64{}
	for _, mod := range mainFirst(p.Modules) {
		id := uint64(len(mapID) + 1)
		mapID[mod] = id
		build := mod.BuildIDHex()
		if build == "" {
			build = mod.GoBuildID
		}
		m.b = m.b[:0]
		m.uint(fMappingID, id)
		m.uint(fMappingStart, mod.Base)
		m.uint(fMappingLimit, mod.Base+mod.Size)
		m.uint(fMappingOffset, mod.FileOffset)
		m.uint(fMappingFile, uint64(e.str(mod.Name())))
		m.uint(fMappingBuildID, uint64(e.str(build)))
		for f := fMappingHasFunctions; f <= fMappingHasInlineFrames; f++ {
			m.uint(f, 1)
		}
		e.b.msg(&e.b, fProfileMapping, m.b)
	}
	type fnKey struct{ name, file string }
	funcs := map[fnKey]uint64{}
	var fnMsgs enc
	fn := func(name, file string) uint64 {
		k := fnKey{name, file}
		if id := funcs[k]; id != 0 {
			return id
		}
		id := uint64(len(funcs) + 1)
		funcs[k] = id
		var f enc
		n := uint64(e.str(name))
		f.uint(fFunctionID, id)
		f.uint(fFunctionName, n)
		f.uint(fFunctionSystemName, n)
		f.uint(fFunctionFilename, uint64(e.str(file)))
		fnMsgs.msg(&fnMsgs, fProfileFunction, f.b)
		return id
	}
	var line enc
	for i, l := range p.Locations {
		m.b = m.b[:0]
		m.uint(fLocationID, uint64(i+1))
		if l.Module != nil {
			m.uint(fLocationMapping, mapID[l.Module])
		}
		m.uint(fLocationAddress, l.Abs)
		if len(l.Frames) == 0 {
			line.b = line.b[:0]
			line.uint(fLineFunction, fn(l.String(), ""))
			m.msg(&m, fLocationLine, line.b)
		}
		for j, f := range l.Frames {
			line.b = line.b[:0]
			line.uint(fLineFunction, fn(l.FunctionName(j), f.File))
			line.uint(fLineLine, uint64(int64(f.Line)))
			line.uint(fLineColumn, uint64(int64(f.Column)))
			m.msg(&m, fLocationLine, line.b)
		}
		e.b.msg(&e.b, fProfileLocation, m.b)
	}
	e.b.b = append(e.b.b, fnMsgs.b...)
	if p.End > p.Start {
		e.b.uint(fProfileDuration, uint64(p.End-p.Start))
	}
	if p.Unweighted {
		e.b.msg(&e.b, fProfilePeriodType, valueType(e, "samples", "count"))
		e.b.uint(fProfilePeriod, 1)
	} else {
		e.b.msg(&e.b, fProfilePeriodType, valueType(e, "cpu", "nanoseconds"))
		if count > 0 {
			e.b.uint(fProfilePeriod, uint64(cpu/count))
		}
	}
	// pprof shows the last sample type unless told: with off-CPU time
	// that would hide on-CPU time behind waiting, so cpu (or, unweighted,
	// samples) stays the default view and -sample_index=off_cpu picks the
	// other.
	switch {
	case memory && count == 0:
		// A heap profile alone: the last type, inuse_space, is the
		// default, as in runtime/pprof's.
	case off > 0 || memory:
		def := "cpu"
		if p.Unweighted {
			def = "samples"
		}
		e.b.uint(fProfileDefaultSampleType, uint64(e.str(def)))
	}
	// The string table last: every string is known by now. pprof reads
	// fields in any order.
	for _, s := range e.strTab {
		e.b.bytes(fProfileStringTable, []byte(s))
	}
	return append(b, e.b.b...)
}

// Field numbers of profile.proto.
const (
	fProfileSampleType        = 1
	fProfileSample            = 2
	fProfileMapping           = 3
	fProfileLocation          = 4
	fProfileFunction          = 5
	fProfileStringTable       = 6
	fProfileDuration          = 10
	fProfilePeriodType        = 11
	fProfilePeriod            = 12
	fProfileDefaultSampleType = 14

	fValueTypeType = 1
	fValueTypeUnit = 2

	fSampleLocation = 1
	fSampleValue    = 2
	fSampleLabel    = 3

	fLabelKey = 1
	fLabelStr = 2
	fLabelNum = 3

	fMappingID              = 1
	fMappingStart           = 2
	fMappingLimit           = 3
	fMappingOffset          = 4
	fMappingFile            = 5
	fMappingBuildID         = 6
	fMappingHasFunctions    = 7
	fMappingHasInlineFrames = 10

	fLocationID      = 1
	fLocationMapping = 2
	fLocationAddress = 3
	fLocationLine    = 4

	fLineFunction = 1
	fLineLine     = 2
	fLineColumn   = 3

	fFunctionID         = 1
	fFunctionName       = 2
	fFunctionSystemName = 3
	fFunctionFilename   = 4
)

type encoder struct {
	b      enc
	strs   map[string]int64
	strTab []string
}

// str returns s's index in the string table, adding it.
func (e *encoder) str(s string) int64 {
	if i, ok := e.strs[s]; ok {
		return i
	}
	i := int64(len(e.strTab))
	e.strs[s] = i
	e.strTab = append(e.strTab, s)
	return i
}

func valueType(e *encoder, typ, unit string) []byte {
	var v enc
	v.uint(fValueTypeType, uint64(e.str(typ)))
	v.uint(fValueTypeUnit, uint64(e.str(unit)))
	return v.b
}

// enc appends protocol buffer fields.
type enc struct{ b []byte }

func (e *enc) varint(v uint64) {
	for v >= 0x80 {
		e.b = append(e.b, byte(v)|0x80)
		v >>= 7
	}
	e.b = append(e.b, byte(v))
}

// uint writes a varint field, omitting zero as proto3 does.
func (e *enc) uint(field int, v uint64) {
	if v == 0 {
		return
	}
	e.varint(uint64(field) << 3)
	e.varint(v)
}

func (e *enc) bytes(field int, d []byte) {
	e.varint(uint64(field)<<3 | 2)
	e.varint(uint64(len(d)))
	e.b = append(e.b, d...)
}

// msg writes an embedded message into dst (which may be e itself).
func (e *enc) msg(dst *enc, field int, body []byte) { dst.bytes(field, body) }

// packed writes n varints as one packed repeated field.
func (e *enc) packed(field, n int, v func(int) uint64) {
	if n == 0 {
		return
	}
	var body enc
	for i := 0; i < n; i++ {
		body.varint(v(i))
	}
	e.bytes(field, body.b)
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
