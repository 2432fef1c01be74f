// Package frames turns a symbolized profile's locations into the frames the
// timeline exporters list: one frame per function at an address, inlined
// functions included, deduplicated by function, file and module.
package frames

import (
	"sort"

	"github.com/rawstack/rawstack/symbolizer"
)

// Frame is one function of a stack.
type Frame struct {
	Name   string // function name, or module+0xoff / 0xaddr when unknown
	File   string // source file, "" when unknown
	Line   int    // line of the first address seen in it, 0 when unknown
	Module string // module path, "" when none
	// Loc is a location (index into Profile.Locations) in this frame,
	// and Inline its frame index there (0: innermost).
	Loc, Inline int
}

// Table assigns indices to frames.
type Table struct {
	Frames []Frame
	p      *symbolizer.Profile
	index  map[key]int
	byLoc  [][]int // per location: frame indices, innermost first
}

type key struct{ name, file, module string }

// New returns an empty table over p's locations.
func New(p *symbolizer.Profile) *Table {
	return &Table{p: p, index: map[key]int{}, byLoc: make([][]int, len(p.Locations))}
}

// Loc returns the frames of location i, innermost first.
func (t *Table) Loc(i int) []int {
	if t.byLoc[i] != nil {
		return t.byLoc[i]
	}
	l := t.p.Locations[i]
	mod := ""
	if l.Module != nil {
		mod = l.Module.Path
	}
	n := len(l.Frames)
	if n == 0 {
		n = 1
	}
	out := make([]int, n)
	for j := 0; j < n; j++ {
		f := Frame{Name: l.FunctionName(j), Module: mod, Loc: i, Inline: j}
		if j < len(l.Frames) {
			f.File, f.Line = l.Frames[j].File, l.Frames[j].Line
		}
		k := key{f.Name, f.File, mod}
		idx, ok := t.index[k]
		if !ok {
			idx = len(t.Frames)
			t.index[k] = idx
			t.Frames = append(t.Frames, f)
		}
		out[j] = idx
	}
	t.byLoc[i] = out
	return out
}

// Stack appends to dst the frames of a leaf-first location list, leaf
// first, and returns it.
func (t *Table) Stack(dst []int, locs []int) []int {
	for _, l := range locs {
		dst = append(dst, t.Loc(l)...)
	}
	return dst
}

// RootFirst reverses s in place and returns it.
func RootFirst(s []int) []int {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
	return s
}

// Busiest returns the timeline's threads with the most samples first
// (ties in timeline order): viewers that open on the first thread then
// show one that ran, not one that slept.
func Busiest(tl *symbolizer.Timeline) []*symbolizer.Thread {
	out := append([]*symbolizer.Thread(nil), tl.Threads...)
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Samples) > len(out[j].Samples) })
	return out
}

// ThreadName is how exporters label a thread: its name and tid.
func ThreadName(th *symbolizer.Thread) string {
	if th.Goroutine != 0 {
		return th.Name // "goroutine ID FUNCTION": its Tid is made up
	}
	if th.Name == "" {
		return "thread " + itoa(th.Tid)
	}
	return th.Name + " (" + itoa(th.Tid) + ")"
}

func itoa(v uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
