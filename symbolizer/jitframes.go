package symbolizer

import (
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

// The splice itself is [RuntimeFrames.Splice] (runtime.go).

// jitFrames is what the builder keeps of a stream's JIT runtime frames.
type jitFrames struct {
	funcs  map[uint64]format.JITFunc
	stacks map[uint64][]format.JITFrame // by PyStack id
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
