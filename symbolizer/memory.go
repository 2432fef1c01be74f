package symbolizer

import (
	"fmt"

	"github.com/rawstack/rawstack/format"
)

// Memory profiles (format/SPEC.md §6.22–6.23): Alloc events add to their
// stack's allocated and in-use figures, Frees take from the in-use ones.

type liveKey struct {
	pid  uint32
	addr uint64
}

// liveAlloc is a sampled block not freed yet.
type liveAlloc struct {
	agg            *Sample
	bytes, objects int64
}

// memLocs returns the locations of stack of pid at t, as a Sample's.
func (b *builder) memLocs(pid uint32, stack uint64, t int64) []int {
	if stack == 0 {
		return nil
	}
	return b.stackLocs(pid, stack, t)
}

func (b *builder) alloc(a *format.Alloc) {
	b.span(a.Time)
	agg := b.aggregate(b.memLocs(a.Pid, a.Stack, a.Time), 0, 0, 0, format.SpanLink{})
	bytes, objs := int64(a.Bytes), int64(a.Objects)
	agg.AllocBytes += bytes
	agg.AllocObjects += objs
	agg.InuseBytes += bytes
	agg.InuseObjects += objs
	b.p.Memory = true
	if a.Addr != 0 {
		if b.live == nil {
			b.live = map[liveKey]liveAlloc{}
		}
		k := liveKey{a.Pid, a.Addr}
		if old, ok := b.live[k]; ok {
			// The block was freed without a Free reaching the trace
			// (lost): the address is a new block now.
			old.agg.InuseBytes -= old.bytes
			old.agg.InuseObjects -= old.objects
		}
		b.live[k] = liveAlloc{agg, bytes, objs}
	}
	if b.tl != nil {
		b.tl.inuse(a.Time, a.Pid, bytes)
	}
}

func (b *builder) free(f *format.Free) {
	var bytes, objs int64
	if f.Addr != 0 {
		k := liveKey{f.Pid, f.Addr}
		l, ok := b.live[k]
		if !ok {
			b.p.UnmatchedFrees++
			return
		}
		delete(b.live, k)
		l.agg.InuseBytes -= l.bytes
		l.agg.InuseObjects -= l.objects
		bytes = l.bytes
	} else {
		agg := b.aggregate(b.memLocs(f.Pid, f.Stack, f.Time), 0, 0, 0, format.SpanLink{})
		bytes, objs = int64(f.Bytes), int64(f.Objects)
		agg.InuseBytes -= bytes
		agg.InuseObjects -= objs
	}
	b.span(f.Time)
	if b.tl != nil {
		b.tl.inuse(f.Time, f.Pid, -bytes)
	}
}

// inuse adds delta bytes to the in-use counter of pid: the timelines
// show a process's sampled heap over time.
func (tb *timelineBuilder) inuse(t int64, pid uint32, delta int64) {
	tb.at(t)
	name := fmt.Sprintf("in-use bytes (pid %d)", pid)
	c := tb.counters[name]
	if c == nil {
		c = &CounterTrack{Name: name}
		tb.counters[name] = c
		tb.tl.Counters = append(tb.tl.Counters, c)
	}
	v := float64(delta)
	if n := len(c.Points); n > 0 {
		v += c.Points[n-1].Value
	}
	c.Points = append(c.Points, CounterPoint{t, v})
}
