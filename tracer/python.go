package tracer

import (
	"encoding/binary"

	"github.com/rawstack/rawstack/format"
)

// pyTable interns what a back end reports of a thread's managed frames
// (platform.Sample's Python, NewPyCodes, JIT and NewJITFuncs): code
// objects as PyCode events and JIT runtime functions as JITFunc events,
// written once with the back end's ids, and lists of frames as PyStack
// events, all replayed on hot join (format/SPEC.md §7).
type pyTable struct {
	codes  []format.PyCode
	funcs  []format.JITFunc
	ids    map[string]uint64 // encoded frames → PyStack id
	stacks []format.PyStack
	key    []byte
}

// intern writes the code objects in fresh and the functions in funcs and
// returns the PyStack id of frames, the thread's hold on the GIL and the
// JIT frames jit, writing its definition when new; 0 for no frames and
// no hold. Called with t.mu held; it does not allocate for a list of
// frames seen before.
func (p *pyTable) intern(w *format.Writer, fresh []format.PyCode, frames []format.PyFrame, gil format.PyGIL, funcs []format.JITFunc, jit []format.JITFrame) uint64 {
	for i := range fresh {
		c := fresh[i]
		c.Lines = append([]byte(nil), c.Lines...)
		p.codes = append(p.codes, c)
		w.WritePyCode(&c)
	}
	for i := range funcs {
		p.funcs = append(p.funcs, funcs[i])
		w.WriteJITFunc(&funcs[i])
	}
	if len(frames) == 0 && gil == format.PyGILNone && len(jit) == 0 {
		return 0
	}
	p.key = binary.AppendUvarint(append(p.key[:0], byte(gil)), uint64(len(frames)))
	for _, f := range frames {
		where := uint64(f.Offset) << 1
		if f.Entry {
			where |= 1
		}
		p.key = binary.AppendUvarint(binary.AppendUvarint(p.key, f.Code), where)
	}
	for _, f := range jit {
		p.key = binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(p.key, f.PC), f.Func), uint64(f.Line)<<4|uint64(f.Tier)<<1|b2u(f.Inlined))
	}
	if id, ok := p.ids[string(p.key)]; ok {
		return id
	}
	if p.ids == nil {
		p.ids = map[string]uint64{}
	}
	id := uint64(len(p.stacks) + 1)
	p.ids[string(p.key)] = id
	s := format.PyStack{ID: id, Frames: append([]format.PyFrame(nil), frames...), GIL: gil}
	if len(jit) > 0 {
		s.JIT = append([]format.JITFrame(nil), jit...)
	}
	p.stacks = append(p.stacks, s)
	w.WriteFrames(id, frames, gil, jit)
	return id
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// replay writes every code object, function and stack defined so far.
func (p *pyTable) replay(w *format.Writer) {
	for i := range p.codes {
		w.WritePyCode(&p.codes[i])
	}
	for i := range p.funcs {
		w.WriteJITFunc(&p.funcs[i])
	}
	for _, s := range p.stacks {
		w.WriteFrames(s.ID, s.Frames, s.GIL, s.JIT)
	}
}
