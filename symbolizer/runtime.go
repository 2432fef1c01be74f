package symbolizer

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/rawstack/rawstack/format"
)

// RuntimeFrames is what a stream's own events say about the frames of
// its samples, beyond what module files say: the code JIT runtimes
// published in perf maps and jitdump files (JITCode, JITUnload: jit.go),
// the Python frames of each sample (PyCode, PyStack: python.go) and the
// frames JIT runtime readers named from V8's or HotSpot's own metadata
// (JITFunc, PyStack: jitframes.go). It is the one place those frames are
// named and put into stacks: [Build] (every file output) and the OTLP
// builder (convert --to otlp, the stream, the agent) both use it, so every
// output holds the same frames in the same order.
//
// Feed it every event with [RuntimeFrames.Event]; name JIT code with
// [RuntimeFrames.JITCode] and put a sample's Python and JIT runtime frames
// into its native stack with [RuntimeFrames.Splice]. It is not safe for
// concurrent use.
type RuntimeFrames struct {
	jit  jitDB
	strs map[uint64]string // String events: JIT names and files
	py   pyEvents
	rt   jitFrames
}

// pyEvents are a stream's Python events.
type pyEvents struct {
	codes  map[uint64]format.PyCode
	stacks map[uint64][]format.PyFrame
	gil    map[uint64]format.PyGIL // PyStacks that carry a hold on the GIL
}

// Event takes one event of the stream; it keeps, copied, what names
// frames and ignores the rest.
func (r *RuntimeFrames) Event(ev *format.Event) {
	switch ev.Kind {
	case format.KindString:
		if r.strs == nil {
			r.strs = map[uint64]string{}
		}
		r.strs[ev.String.ID] = ev.String.Value
	case format.KindJITCode:
		r.jit.code(&ev.JITCode)
	case format.KindJITUnload:
		r.jit.unload(&ev.JITUnload)
	case format.KindPyCode:
		if r.py.codes == nil {
			r.py.codes = map[uint64]format.PyCode{}
		}
		c := ev.PyCode
		c.Lines = append([]byte(nil), c.Lines...)
		r.py.codes[c.ID] = c
	case format.KindJITFunc:
		r.rt.fn(&ev.JITFunc)
	case format.KindPyStack:
		if r.py.stacks == nil {
			r.py.stacks = map[uint64][]format.PyFrame{}
		}
		r.py.stacks[ev.PyStack.ID] = append([]format.PyFrame(nil), ev.PyStack.Frames...)
		r.rt.stack(&ev.PyStack)
		if g := ev.PyStack.GIL; g == format.PyGILHeld || g == format.PyGILWaiting {
			if r.py.gil == nil {
				r.py.gil = map[uint64]format.PyGIL{}
			}
			r.py.gil[ev.PyStack.ID] = g
		}
	}
}

// Forget drops the JIT code of processes that ended, so that a long
// whole-host stream does not grow with the processes it has seen.
// (Python and JIT runtime events are interned by content across
// processes, as the writer interns them, and kept.)
func (r *RuntimeFrames) Forget(pids []uint32) {
	for _, pid := range pids {
		delete(r.jit.byPid, pid)
	}
}

// HasJIT reports whether the stream published JIT code for pid.
func (r *RuntimeFrames) HasJIT(pid uint32) bool { return r.jit.byPid[pid] != nil }

// JITCodeFrame is a frame of JIT code as the runtime published it.
type JITCodeFrame struct {
	Frame
	// Start is the first byte of the code the entry covers.
	Start uint64
	// Entry identifies the entry (its arrival order in the stream): two
	// lookups with the same Entry and address give the same frame.
	Entry int
}

// JITCode names address addr of pid (a return address already moved into
// its call) at time t from the JIT code the stream published, as
// format/SPEC.md §6.20 says: the entry valid at t, else the first one
// published after it. It does not ask whether a module file covers addr:
// callers consult it only for addresses that none does. Entries can
// arrive after the samples they name; a streaming caller names with the
// entries seen so far.
func (r *RuntimeFrames) JITCode(pid uint32, addr uint64, t int64) (JITCodeFrame, bool) {
	if r.jit.byPid[pid] == nil {
		return JITCodeFrame{}, false
	}
	r.jit.finalize()
	e := r.jit.lookup(pid, addr, t)
	if e == nil {
		return JITCodeFrame{}, false
	}
	return JITCodeFrame{Frame: e.frame(addr, r.strs), Start: e.start, Entry: e.seq}, true
}

// HasPython reports whether PyStack python holds Python frames (which go
// at the stack's evaluation frames, so [RuntimeFrames.Splice] needs to
// know them).
func (r *RuntimeFrames) HasPython(python uint64) bool {
	return python != 0 && len(r.py.stacks[python]) > 0
}

// PythonGIL returns the GIL state PyStack python carries, if any.
func (r *RuntimeFrames) PythonGIL(python uint64) (format.PyGIL, bool) {
	g, ok := r.py.gil[python]
	return g, ok
}

// NativeFrame is one frame of a sample's native stack, as [RuntimeFrames.Splice]
// needs it.
type NativeFrame struct {
	// PC is the address as the stack holds it (a return address above
	// the leaf).
	PC uint64
	// Eval says the frame is in the interpreter's evaluation loop
	// ([IsPythonEval] of its frames).
	Eval bool
}

// Runtimes of the frames a stream's own events name.
const (
	RuntimePython  = "python"
	RuntimeV8      = "v8"
	RuntimeHotSpot = "hotspot"
)

// StackFrame is one frame of a spliced stack: native frame Native of the
// input, or (Native < 0) a frame the stream's events name.
type StackFrame struct {
	Native int
	// Runtime says whose frame it is: RuntimePython, RuntimeV8,
	// RuntimeHotSpot, or "" for a JIT runtime the stream did not name.
	Runtime string
	// PC is, for a JIT runtime's frame, the address of the native frame
	// it replaced; for a Python frame the instruction's offset in its
	// code object's bytecode.
	PC uint64
	// Frames are its functions, innermost first (a JIT runtime's
	// compiled code holds the functions it inlined).
	Frames []Frame
	// Key identifies the frame within the stream: frames with equal keys
	// are equal, so a caller interns its locations by Key.
	Key string
}

// Splice returns the frames of a sample's stack, leaf first: native, its
// native frames, with the frames of PyStack python (0: none) put in,
// as format/SPEC.md §6.25 says. First each group of JIT runtime frames
// replaces, in order from the leaf, the native frame at its pc (a group
// whose pc the native stack does not hold is left out). Then the Python
// frames, leaf first, fall into groups that each end (rootward) at an
// entry frame; group k from the leaf goes just leafward of the k-th
// evaluation frame from the leaf. Groups left over (the native stack was
// cut, or its unwinding missed evaluation frames) go at the root end, in
// order. A native stack with no evaluation frame gets no Python frames:
// the recorder reads them when it drains the sample, a few milliseconds
// later, and a thread sampled outside the interpreter (in start-up, in a
// C extension's thread) may have run Python code by then.
func (r *RuntimeFrames) Splice(native []NativeFrame, python uint64) []StackFrame {
	out := make([]StackFrame, len(native))
	for i := range out {
		out[i].Native = i
	}
	if python == 0 {
		return out
	}
	if frames := r.rt.stacks[python]; len(frames) > 0 {
		at := 0
		for start := 0; start < len(frames); {
			end := start
			for end < len(frames)-1 && frames[end].Inlined {
				end++
			}
			group := frames[start : end+1]
			start = end + 1
			for i := at; i < len(out); i++ {
				if out[i].Native >= 0 && native[out[i].Native].PC == group[0].PC {
					out[i] = r.jitGroup(group)
					at = i + 1
					break
				}
			}
		}
	}
	frames := r.py.stacks[python]
	isEval := func(f StackFrame) bool { return f.Native >= 0 && native[f.Native].Eval }
	if len(frames) == 0 || !slices.ContainsFunc(out, isEval) {
		return out
	}
	var groups [][]StackFrame
	var cur []StackFrame
	for _, f := range frames {
		cur = append(cur, r.pyFrame(f))
		if f.Entry {
			groups = append(groups, cur)
			cur = nil
		}
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	spliced := make([]StackFrame, 0, len(out)+len(frames))
	g := 0
	for _, f := range out {
		if g < len(groups) && isEval(f) {
			spliced = append(spliced, groups[g]...)
			g++
		}
		spliced = append(spliced, f)
	}
	for ; g < len(groups); g++ {
		spliced = append(spliced, groups[g]...)
	}
	return spliced
}

// pyFrame names Python frame f: its code object's name and file, and the
// line of the instruction it was at.
func (r *RuntimeFrames) pyFrame(f format.PyFrame) StackFrame {
	c, ok := r.py.codes[f.Code]
	line := 0
	if ok {
		line, _ = PyLine(c.Table, c.Lines, c.FirstLine, f.Offset)
	}
	key := binary.AppendUvarint([]byte{'p'}, f.Code)
	key = binary.AppendUvarint(key, uint64(line))
	sf := StackFrame{Native: -1, Runtime: RuntimePython, PC: uint64(f.Offset), Key: string(key)}
	if ok {
		sf.Frames = []Frame{{Function: c.Name, File: c.File, Line: line}}
	} else {
		sf.Frames = []Frame{{Function: "[python code " + itoa(f.Code) + "]"}}
	}
	return sf
}

// jitGroup names one native frame's JIT runtime frames.
func (r *RuntimeFrames) jitGroup(group []format.JITFrame) StackFrame {
	key := binary.AppendUvarint([]byte{'j'}, group[0].PC)
	for _, f := range group {
		key = binary.AppendUvarint(binary.AppendUvarint(key, f.Func), uint64(f.Line))
	}
	sf := StackFrame{Native: -1, PC: group[0].PC, Key: string(key)}
	switch r.rt.funcs[group[len(group)-1].Func].Runtime {
	case format.JITRuntimeV8:
		sf.Runtime = RuntimeV8
	case format.JITRuntimeHotSpot:
		sf.Runtime = RuntimeHotSpot
	}
	for _, f := range group {
		fn, ok := r.rt.funcs[f.Func]
		if !ok {
			sf.Frames = append(sf.Frames, Frame{Function: "[jit function " + itoa(f.Func) + "]"})
			continue
		}
		sf.Frames = append(sf.Frames, Frame{Function: fn.Name, File: fn.File, Line: int(f.Line)})
	}
	return sf
}

// IsPythonEval reports whether frames (one address's, innermost first)
// are in CPython's evaluation loop, where a sample's Python frames go.
func IsPythonEval(frames []Frame) bool {
	for _, f := range frames {
		if f.Function == evalFunction {
			return true
		}
	}
	return false
}

// runtimeModule returns the pseudo-module of a runtime's frames in a
// Profile: "[python]", "[v8]", "[hotspot]" ("[unknown]" for a runtime
// the stream did not name).
func (b *builder) runtimeModule(rt string) *Module {
	if m := b.rtModules[rt]; m != nil {
		return m
	}
	if b.rtModules == nil {
		b.rtModules = map[string]*Module{}
	}
	name := rt
	if name == "" {
		name = format.JITRuntimeUnknown.String()
	}
	b.jitModules++
	m := &Module{ModuleLoad: format.ModuleLoad{ID: math.MaxUint64 - b.jitModules, Kind: format.ModuleJIT, Path: "[" + name + "]"}, Unload: math.MaxInt64, jit: true}
	b.rtModules[rt] = m
	b.p.Modules = append(b.p.Modules[:len(b.p.Modules):len(b.p.Modules)], m)
	return m
}
