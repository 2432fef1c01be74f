package symbolizer

import (
	"encoding/binary"
	"math"

	"github.com/rawstack/rawstack/format"
)

// JIT runtime frames (format/SPEC.md §6.25, §6.26). A sample of a thread
// running V8 or HotSpot code carries, in its PyStack, the frames the
// runtime's reader named from the runtime's own metadata: each is tied to
// the native frame it names by that frame's address, and the frames a
// compiler inlined into one native frame come together, innermost first.
// Each such group replaces its native location by one location of the
// runtime's pseudo-module ("[v8]", "[hotspot]") whose frames are the
// group's, as DWARF's inlined frames are one location's frames: the
// interpreter's trampoline frame becomes the JavaScript function it
// runs, an anonymous address of compiled code the function (and the
// functions inlined in it) with their lines. Where a perf map or jitdump
// named the same address, the runtime's metadata wins.

// jitFrames is what the builder keeps of a stream's JIT runtime frames.
type jitFrames struct {
	funcs   map[uint64]format.JITFunc
	stacks  map[uint64][]format.JITFrame // by PyStack id
	locs    map[string]int
	modules map[format.JITRuntime]*Module
	key     []byte
}

func (j *jitFrames) fn(f *format.JITFunc) {
	if j.funcs == nil {
		j.funcs = map[uint64]format.JITFunc{}
	}
	j.funcs[f.ID] = *f
}

func (j *jitFrames) stack(s *format.PyStack) {
	if len(s.JIT) == 0 {
		return
	}
	if j.stacks == nil {
		j.stacks = map[uint64][]format.JITFrame{}
	}
	j.stacks[s.ID] = append([]format.JITFrame(nil), s.JIT...)
}

// spliceJIT returns locs with each group of PyStack python's JIT frames in
// place of the native location at its address. Groups are matched in
// order, leaf first: a group whose address the native stack does not
// hold (its unwinding took another path) is left out, never placed
// elsewhere.
func (b *builder) spliceJIT(locs []int, python uint64) []int {
	frames := b.py.jit.stacks[python]
	if len(frames) == 0 {
		return locs
	}
	out := append([]int(nil), locs...)
	at := 0
	for start := 0; start < len(frames); {
		end := start
		for end < len(frames)-1 && frames[end].Inlined {
			end++
		}
		group := frames[start : end+1]
		start = end + 1
		for i := at; i < len(out); i++ {
			if b.p.Locations[out[i]].Abs == group[0].PC {
				out[i] = b.jitLoc(group)
				at = i + 1
				break
			}
		}
	}
	return out
}

// jitLoc returns the location of one native frame's JIT frames.
func (b *builder) jitLoc(group []format.JITFrame) int {
	j := &b.py.jit
	j.key = binary.AppendUvarint(j.key[:0], group[0].PC)
	for _, f := range group {
		j.key = binary.AppendUvarint(binary.AppendUvarint(j.key, f.Func), uint64(f.Line))
	}
	if i, ok := j.locs[string(j.key)]; ok {
		return i
	}
	if j.locs == nil {
		j.locs = map[string]int{}
		j.modules = map[format.JITRuntime]*Module{}
	}
	rt := j.funcs[group[len(group)-1].Func].Runtime
	m := j.modules[rt]
	if m == nil {
		b.jitModules++
		m = &Module{ModuleLoad: format.ModuleLoad{ID: math.MaxUint64 - b.jitModules, Kind: format.ModuleJIT, Path: "[" + rt.String() + "]"}, Unload: math.MaxInt64, jit: true}
		j.modules[rt] = m
		b.p.Modules = append(b.p.Modules[:len(b.p.Modules):len(b.p.Modules)], m)
	}
	l := &Location{Module: m, Abs: group[0].PC, Addr: group[0].PC}
	for _, f := range group {
		fn, ok := j.funcs[f.Func]
		if !ok {
			l.Frames = append(l.Frames, Frame{Function: "[jit function " + itoa(f.Func) + "]"})
			continue
		}
		l.Frames = append(l.Frames, Frame{Function: fn.Name, File: fn.File, Line: int(f.Line)})
	}
	i := len(b.p.Locations)
	b.p.Locations = append(b.p.Locations, l)
	j.locs[string(j.key)] = i
	return i
}
