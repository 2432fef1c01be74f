package symbolizer

import (
	"github.com/rawstack/rawstack/format"
)

// Python frames (format/SPEC.md §6.24, §6.25). A sample of a CPython
// thread carries, besides its native stack, the thread's Python frames:
// code object and instruction offset. Each is resolved to function, file
// and line with the code object's line table, and spliced into the
// native stack at the interpreter's evaluation frames, so one stack
// reads main → … → _PyEval_EvalFrameDefault → alpha_py → beta_py →
// gamma_py → [native callee]. Python frames are locations of the
// "[python]" pseudo-module; their address is the instruction's offset.

// evalFunction is the interpreter loop: each of its native frames runs
// the Python frames from one entry frame on (format.PyFrame.Entry).
const evalFunction = "_PyEval_EvalFrameDefault"

// pyState is the builder's interning of runtime frames: one location per
// StackFrame key.
type pyState struct {
	locs map[string]int
}

// LabelPythonGIL is the label a sample of a Python thread gets when the
// thread held its interpreter's GIL ("held") or was blocked taking it
// ("waiting", snapshots): pprof -tagfocus=python.gil=held keeps the
// samples that ran Python code.
const LabelPythonGIL = "python.gil"

// pyLabels returns labels with the GIL label of PyStack python added.
func (b *builder) pyLabels(labels []format.Label, python uint64) []format.Label {
	g, ok := b.rf.PythonGIL(python)
	if !ok {
		return labels
	}
	return append(labels[:len(labels):len(labels)], format.Label{Key: LabelPythonGIL, Value: g.String()})
}

// splicePython puts each sample's Python and JIT runtime frames into its
// native stack ([RuntimeFrames.Splice]), once the native locations are
// symbolized, in the profile's samples and in the timeline's.
func (b *builder) splicePython() {
	if len(b.rf.py.stacks) == 0 {
		return
	}
	type key struct {
		python uint64
		locs   *int
		n      int
	}
	cache := map[key][]int{}
	var native []NativeFrame
	splice := func(locs []int, python uint64) []int {
		if python == 0 {
			return locs
		}
		k := key{python: python, n: len(locs)}
		if len(locs) > 0 {
			k.locs = &locs[0]
		}
		out, ok := cache[k]
		if !ok {
			native = native[:0]
			for _, li := range locs {
				l := b.p.Locations[li]
				native = append(native, NativeFrame{PC: l.Abs, Eval: IsPythonEval(l.Frames)})
			}
			out = make([]int, 0, len(locs))
			for _, f := range b.rf.Splice(native, python) {
				if f.Native >= 0 {
					out = append(out, locs[f.Native])
				} else {
					out = append(out, b.runtimeLoc(&f))
				}
			}
			cache[k] = out
		}
		return out
	}
	for _, s := range b.p.Samples {
		s.Locs = splice(s.Locs, s.python)
	}
	if b.p.Timeline != nil {
		for _, th := range b.p.Timeline.Threads {
			for i := range th.Samples {
				ts := &th.Samples[i]
				ts.Locs = splice(ts.Locs, ts.python)
			}
		}
	}
}

// runtimeLoc returns the location of a frame the stream's events name,
// in its runtime's pseudo-module ("[python]", "[v8]", "[hotspot]").
func (b *builder) runtimeLoc(f *StackFrame) int {
	if i, ok := b.py.locs[f.Key]; ok {
		return i
	}
	if b.py.locs == nil {
		b.py.locs = map[string]int{}
	}
	l := &Location{Module: b.runtimeModule(f.Runtime), Abs: f.PC, Addr: f.PC, Frames: f.Frames}
	i := len(b.p.Locations)
	b.p.Locations = append(b.p.Locations, l)
	b.py.locs[f.Key] = i
	return i
}

// PyLine returns the source line of the instruction at byte offset off of
// a code object whose line table is table (in encoding kind) and whose
// first line is first; false when the table gives the instruction no
// line or cannot be read.
func PyLine(kind format.PyLineTable, table []byte, first uint32, off uint32) (int, bool) {
	switch kind {
	case format.PyLineTableNone:
		return int(first), true
	case format.PyLineTableLocations:
		return lineLocations(table, int(first), off/2)
	case format.PyLineTable310:
		return line310(table, int(first), off)
	case format.PyLineTableLnotab:
		return lineLnotab(table, int(first), off)
	}
	return 0, false
}

// lineLocations reads a 3.11+ location table (CPython's
// Objects/locations.md): entries of a first byte 1CCCCLLL (code C,
// length L+1 code units) and the code's operands, in 6-bit varints.
func lineLocations(t []byte, line int, unit uint32) (int, bool) {
	var addr uint32
	i := 0
	varint := func() (uint32, bool) {
		var v uint32
		for shift := 0; shift < 32; shift += 6 {
			if i >= len(t) {
				return 0, false
			}
			c := t[i]
			i++
			v |= uint32(c&63) << shift
			if c&64 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	svarint := func() (int, bool) {
		u, ok := varint()
		if u&1 != 0 {
			return -int(u >> 1), ok
		}
		return int(u >> 1), ok
	}
	for i < len(t) {
		h := t[i]
		i++
		if h&0x80 == 0 {
			return 0, false
		}
		code, n := h>>3&15, uint32(h&7)+1
		noLine := false
		switch {
		case code == 15:
			noLine = true
		case code == 14: // long form: line delta, end line delta, columns
			d, ok := svarint()
			_, ok2 := varint()
			_, ok3 := varint()
			_, ok4 := varint()
			if !ok || !ok2 || !ok3 || !ok4 {
				return 0, false
			}
			line += d
		case code == 13: // no column
			d, ok := svarint()
			if !ok {
				return 0, false
			}
			line += d
		case code >= 10: // one-line form: two column bytes
			line += int(code) - 10
			i += 2
		default: // short form: one column byte
			i++
		}
		if unit < addr+n {
			if noLine || i > len(t) {
				return 0, false
			}
			return line, true
		}
		addr += n
	}
	return 0, false
}

// line310 reads a 3.10 co_linetable: pairs (bytecode bytes, line delta),
// a delta of -128 meaning no line.
func line310(t []byte, line int, off uint32) (int, bool) {
	var addr uint32
	for i := 0; i+1 < len(t); i += 2 {
		n, d := uint32(t[i]), int8(t[i+1])
		if d != -128 {
			line += int(d)
		}
		if n > 0 && off < addr+n {
			if d == -128 {
				return 0, false
			}
			return line, true
		}
		addr += n
	}
	return 0, false
}

// lineLnotab reads a 3.8–3.9 co_lnotab: pairs (bytecode increment, line
// increment), the line increment signed.
func lineLnotab(t []byte, line int, off uint32) (int, bool) {
	var addr uint32
	for i := 0; i+1 < len(t); i += 2 {
		addr += uint32(t[i])
		if addr > off {
			break
		}
		line += int(int8(t[i+1]))
	}
	return line, true
}
