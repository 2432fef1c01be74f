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
	Samples     Value = iota // sample count
	CPUNanos                 // on-CPU nanoseconds
	OffCPUNanos              // off-CPU nanoseconds (time threads waited)
)

// ErrNoCPUTime says CPUNanos was asked of a profile whose on-CPU samples
// all weigh 1: counts, not time (format/SPEC.md §6.10).
var ErrNoCPUTime = errors.New("folded: the trace's on-CPU samples carry no CPU time (every one weighs 1, as in recordings older than ns weights and snapshots): use samples")

// Write writes the folded stacks of p, sorted by stack text.
func Write(w io.Writer, p *symbolizer.Profile, v Value) error {
	if v == CPUNanos && p.Unweighted {
		return ErrNoCPUTime
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
		val := s.Count
		switch v {
		case CPUNanos:
			val = s.CPUNanos
		case OffCPUNanos:
			val = s.OffCPUNanos
		}
		if val == 0 && v != Samples {
			continue // a stack seen only off CPU has no on-CPU time, and the reverse
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
