// Package text prints a symbolized profile as a plain-text report: the
// top functions by self samples (the function running when sampled) and
// by total samples (the function anywhere on the stack), with the module
// each lives in.
package text

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/rawstack/rawstack/symbolizer"
)

type entry struct {
	name, module string
	self, total  int64
}

// Write prints the report with the top n functions of each table.
func Write(w io.Writer, p *symbolizer.Profile, n int) error {
	return WriteValue(w, p, n, "", nil)
}

// WriteValue prints the report weighting each stack by val instead of
// its sample count, e.g. the bytes allocated there; what names the value
// in the report's first line ("alloc_space bytes"). With val nil it is
// Write.
func WriteValue(w io.Writer, p *symbolizer.Profile, n int, what string, val func(*symbolizer.Sample) int64) error {
	if val == nil {
		val = func(s *symbolizer.Sample) int64 { return s.Count }
	}
	type key struct{ name, module string }
	stats := map[key]*entry{}
	get := func(l *symbolizer.Location, i int) *entry {
		k := key{l.FunctionName(i), ""}
		if l.Module != nil {
			k.module = l.Module.Name()
		}
		e := stats[k]
		if e == nil {
			e = &entry{name: k.name, module: k.module}
			stats[k] = e
		}
		return e
	}
	var total, cpu, off int64
	seen := map[*entry]bool{}
	for _, s := range p.Samples {
		v := val(s)
		total += v
		cpu += s.CPUNanos
		off += s.OffCPUNanos
		if len(s.Locs) == 0 || v == 0 {
			continue
		}
		get(p.Locations[s.Locs[0]], 0).self += v
		clear(seen)
		for _, li := range s.Locs {
			l := p.Locations[li]
			nf := len(l.Frames)
			if nf == 0 {
				nf = 1
			}
			for j := 0; j < nf; j++ {
				e := get(l, j)
				if !seen[e] {
					seen[e] = true
					e.total += v
				}
			}
		}
	}
	all := make([]*entry, 0, len(stats))
	for _, e := range stats {
		all = append(all, e)
	}
	if what == "" {
		what = "samples"
	}
	fmt.Fprintf(w, "%d %s", total, what)
	if p.End > p.Start {
		fmt.Fprintf(w, " over %v", time.Duration(p.End-p.Start).Round(time.Millisecond))
	}
	// Totals in the trace's units (format/SPEC.md §6.10): CPU time when
	// on-CPU weights are ns, time waited off CPU.
	if cpu > 0 && !p.Unweighted {
		fmt.Fprintf(w, ", %v on CPU", time.Duration(cpu))
	}
	if off > 0 {
		fmt.Fprintf(w, ", %v off CPU", time.Duration(off))
	}
	fmt.Fprintf(w, ", %d distinct stacks, %d locations, %d modules", len(p.Samples), len(p.Locations), len(p.Modules))
	if p.Lost > 0 {
		fmt.Fprintf(w, ", %d lost", p.Lost)
	}
	if p.BadChunks > 0 {
		fmt.Fprintf(w, ", %d damaged chunks skipped", p.BadChunks)
	}
	if p.RawStacks > 0 {
		fmt.Fprintf(w, ", %d of them unwound from raw stacks", p.RawStacks)
	}
	fmt.Fprintln(w)
	table := func(title string, val func(*entry) int64) {
		sort.Slice(all, func(i, j int) bool {
			a, b := val(all[i]), val(all[j])
			if a != b {
				return a > b
			}
			return all[i].name < all[j].name
		})
		fmt.Fprintf(w, "\nTop %d by %s:\n", n, title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "self\tself%%\ttotal\ttotal%%\t\t\n")
		for i, e := range all {
			if i == n || val(e) == 0 {
				break
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t  \t%s\n", e.self, pct(e.self, total), e.total, pct(e.total, total), label(e))
		}
		tw.Flush()
	}
	table("self", func(e *entry) int64 { return e.self })
	table("total", func(e *entry) int64 { return e.total })
	return nil
}

func label(e *entry) string {
	if e.module == "" {
		return e.name
	}
	return e.name + "  [" + e.module + "]"
}

func pct(v, total int64) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", float64(v)*100/float64(total))
}
