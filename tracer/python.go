package tracer

import (
	"encoding/binary"

	"github.com/rawstack/rawstack/format"
)

// pyTable interns what a back end reports of Python frames
// (platform.Sample's Python and NewPyCodes): code objects as PyCode
// events, written once with the back end's ids, and lists of frames as
// PyStack events, both replayed on hot join (format/SPEC.md §7).
type pyTable struct {
	codes  []format.PyCode
	ids    map[string]uint64 // encoded frames → PyStack id
	stacks []format.PyStack
	key    []byte
}

// intern writes the code objects in fresh and returns the PyStack id of
// frames and the thread's hold on the GIL, writing its definition when
// new; 0 for no frames and no hold. Called with t.mu held; it does not
// allocate for a list of frames seen before.
func (p *pyTable) intern(w *format.Writer, fresh []format.PyCode, frames []format.PyFrame, gil format.PyGIL) uint64 {
	for i := range fresh {
		c := fresh[i]
		c.Lines = append([]byte(nil), c.Lines...)
		p.codes = append(p.codes, c)
		w.WritePyCode(&c)
	}
	if len(frames) == 0 && gil == format.PyGILNone {
		return 0
	}
	p.key = append(p.key[:0], byte(gil))
	for _, f := range frames {
		where := uint64(f.Offset) << 1
		if f.Entry {
			where |= 1
		}
		p.key = binary.AppendUvarint(binary.AppendUvarint(p.key, f.Code), where)
	}
	if id, ok := p.ids[string(p.key)]; ok {
		return id
	}
	if p.ids == nil {
		p.ids = map[string]uint64{}
	}
	id := uint64(len(p.stacks) + 1)
	p.ids[string(p.key)] = id
	p.stacks = append(p.stacks, format.PyStack{ID: id, Frames: append([]format.PyFrame(nil), frames...), GIL: gil})
	w.WritePyStack(id, frames, gil)
	return id
}

// replay writes every code object and stack defined so far.
func (p *pyTable) replay(w *format.Writer) {
	for i := range p.codes {
		w.WritePyCode(&p.codes[i])
	}
	for _, s := range p.stacks {
		w.WritePyStack(s.ID, s.Frames, s.GIL)
	}
}
