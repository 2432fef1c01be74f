// Package folded exports a symbolized profile as folded stacks, the input
// of flamegraph.pl and many flame graph viewers: one line per distinct
// stack, frames root first separated by ';', then a space and the count:
//
//	main;run;parse 42
//
// Inlined frames appear as frames of their own, outermost first.
package folded

import (
	"bufio"
	"errors"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/rawstack/rawstack/symbolizer"
)

// Value selects the number written after each stack.
type Value int

const (
	Samples      Value = iota // sample count
	CPUNanos                  // on-CPU nanoseconds
	OffCPUNanos               // off-CPU nanoseconds (time threads waited)
	AllocSpace                // bytes allocated (format/SPEC.md §6.22)
	AllocObjects              // allocations
	InuseSpace                // bytes allocated and not freed by the end of the trace
	InuseObjects              // allocations not freed
)

// ParseValue returns the Value named as convert --value names it:
// samples, cpu, offcpu, alloc_space, alloc_objects, inuse_space or
// inuse_objects (the last four as go tool pprof names heap profiles'
// sample types).
func ParseValue(s string) (Value, bool) {
	v, ok := map[string]Value{"samples": Samples, "cpu": CPUNanos, "offcpu": OffCPUNanos,
		"alloc_space": AllocSpace, "alloc_objects": AllocObjects,
		"inuse_space": InuseSpace, "inuse_objects": InuseObjects}[s]
	return v, ok
}

// Of returns the value v of s.
func (v Value) Of(s *symbolizer.Sample) int64 {
	switch v {
	case CPUNanos:
		return s.CPUNanos
	case OffCPUNanos:
		return s.OffCPUNanos
	case AllocSpace:
		return s.AllocBytes
	case AllocObjects:
		return s.AllocObjects
	case InuseSpace:
		return s.InuseBytes
	case InuseObjects:
		return s.InuseObjects
	}
	return s.Count
}

// Memory says v is one of the memory values.
func (v Value) Memory() bool { return v >= AllocSpace }

// ErrNoCPUTime says CPUNanos was asked of a profile whose on-CPU samples
// all weigh 1: counts, not time (format/SPEC.md §6.10).
var ErrNoCPUTime = errors.New("folded: the trace's on-CPU samples carry no CPU time (every one weighs 1, as in recordings older than ns weights and snapshots): use samples")

// ErrNoMemory says a memory value was asked of a trace without
// allocation samples.
var ErrNoMemory = errors.New("folded: the trace has no allocation samples (record with tracer.Options.Heap)")

// Write writes the folded stacks of p, sorted by stack text.
func Write(w io.Writer, p *symbolizer.Profile, v Value) error {
	if v == CPUNanos && p.Unweighted {
		return ErrNoCPUTime
	}
	if v.Memory() && !p.Memory {
		return ErrNoMemory
	}
	sums := map[string]int64{}
	var sb strings.Builder
	for _, s := range p.Samples {
		sb.Reset()
		for i := len(s.Locs) - 1; i >= 0; i-- {
			l := p.Locations[s.Locs[i]]
			n := len(l.Frames)
			if n == 0 {
				n = 1
			}
			for j := n - 1; j >= 0; j-- {
				if sb.Len() > 0 {
					sb.WriteByte(';')
				}
				sb.WriteString(clean(l.FunctionName(j)))
			}
		}
		if sb.Len() == 0 {
			sb.WriteString("[no stack]")
		}
		val := v.Of(s)
		if val == 0 {
			continue // a stack seen only off CPU has no on-CPU time, and the reverse; one seen only allocating has no samples
		}
		sums[sb.String()] += val
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bw := bufio.NewWriter(w)
	for _, k := range keys {
		bw.WriteString(k)
		bw.WriteByte(' ')
		bw.WriteString(strconv.FormatInt(sums[k], 10))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// clean keeps a frame name from breaking the format: ';' separates frames
// and a newline ends the record.
func clean(s string) string {
	if !strings.ContainsAny(s, ";\n") {
		return s
	}
	return strings.NewReplacer(";", ":", "\n", " ").Replace(s)
}
