package otlp

import (
	"encoding/binary"
	"path"
	"strings"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
)

// Frames that the stream's own events name — JIT code from perf maps and
// jitdump files, Python frames, the frames JIT runtime readers named from
// V8's or HotSpot's metadata — are named by symbolizer.RuntimeFrames, as
// for every other output, and put into the stack in the same order. They
// are named in raw profiles too: the Collector sees neither a process's
// perf map nor its interpreter's memory. Their locations carry lines and
// the profile.frame.type of their runtime.

// Frame types of profile.frame.type (OpenTelemetry semantic conventions)
// for the frames of runtimes.
const (
	FrameCPython = "cpython"
	FrameV8JS    = "v8js"
	FrameJVM     = "jvm"
	FrameDotnet  = "dotnet"
	// FrameJIT is JIT code whose runtime is not known: the conventions
	// define no value for it, and allow a custom one.
	FrameJIT = "jit"
)

// stack returns the stack table index of a sample's stack.
func (b *Builder) stack(d *dict, s *pendingSample) int32 {
	pcs, ok := b.stacks[s.stack]
	if s.stack != 0 && !ok {
		b.unknownStacks++
	}
	locs := d.locBuf[:0]
	if s.python == 0 {
		for i, pc := range pcs {
			locs = append(locs, b.location(d, s.pid, callAddr(i, pc), s.time))
		}
	} else {
		// Locations only for the native frames that stay: JIT runtime
		// frames replace some.
		wantEval := b.rf.HasPython(s.python)
		native := d.natBuf[:0]
		for i, pc := range pcs {
			native = append(native, symbolizer.NativeFrame{PC: pc, Eval: wantEval && b.isEval(d, s.pid, callAddr(i, pc), s.time)})
		}
		d.natBuf = native
		for _, f := range b.rf.Splice(native, s.python) {
			if f.Native >= 0 {
				locs = append(locs, b.location(d, s.pid, callAddr(f.Native, pcs[f.Native]), s.time))
			} else {
				locs = append(locs, b.runtimeLocation(d, s.pid, s.time, &f))
			}
		}
	}
	d.locBuf = locs
	d.keyBuf = d.keyBuf[:0]
	for _, li := range locs {
		d.keyBuf = binary.AppendUvarint(d.keyBuf, uint64(li))
	}
	if i, ok := d.stacks[string(d.keyBuf)]; ok {
		return i
	}
	i := int32(d.d.StackTable().Len())
	d.d.StackTable().AppendEmpty().LocationIndices().FromRaw(locs)
	d.stacks[string(d.keyBuf)] = i
	return i
}

// callAddr returns the address to name for frame i of a stack whose
// frame holds pc: for every frame but the leaf, pc is a return address,
// and the address inside the call instruction is one less.
func callAddr(i int, pc uint64) uint64 {
	if i > 0 && pc > 0 {
		return pc - 1
	}
	return pc
}

// fileBacked reports whether m is a module with a file to name its code.
func fileBacked(m *symbolizer.Module) bool {
	return m != nil && m.Kind != format.ModuleAnon && m.Kind != format.ModuleJIT
}

type locKey struct {
	mod  *symbolizer.Module
	addr uint64
	jit  int // the JIT code entry naming the address, 0 for none
}

// location returns the location of native frame address addr of pid at t
// (a return address already moved into its call).
func (b *Builder) location(d *dict, pid uint32, addr uint64, t int64) int32 {
	m := b.db.Lookup(pid, addr, t)
	var jit symbolizer.JITCodeFrame
	named := false
	if !fileBacked(m) {
		jit, named = b.rf.JITCode(pid, addr, t)
	}
	k := locKey{m, addr, jit.Entry}
	if i, ok := d.locs[k]; ok {
		return i
	}
	var mi int32
	if m != nil {
		mi = d.mapping(m)
	}
	var i int32
	switch {
	case named:
		i = d.location(mi, addr, b.jitFrameType(pid, jit.Function), []symbolizer.Frame{jit.Frame})
	case m != nil && m.Kind == format.ModuleKernel:
		var frames []symbolizer.Frame
		if !b.opts.RawKernel || !b.opts.Raw {
			frames, _, _ = b.resolver().Resolve(m, addr)
		}
		i = d.location(mi, addr, FrameKernel, frames)
	default:
		var frames []symbolizer.Frame
		if m != nil && !b.opts.Raw {
			frames, _, _ = b.resolver().Resolve(m, addr)
		}
		i = d.location(mi, addr, FrameNative, frames)
	}
	d.locs[k] = i
	return i
}

// isEval reports whether native address addr of pid at t is in CPython's
// evaluation loop, where a sample's Python frames go. A raw profile names
// no native frame, yet finds these: only in stacks that carry Python
// frames, through the same resolver (the interpreter's symbol table).
func (b *Builder) isEval(d *dict, pid uint32, addr uint64, t int64) bool {
	m := b.db.Lookup(pid, addr, t)
	if !fileBacked(m) || m.Kind == format.ModuleKernel {
		return false
	}
	k := locKey{mod: m, addr: addr}
	if e, ok := d.evals[k]; ok {
		return e
	}
	frames, _, _ := b.resolver().Resolve(m, addr)
	e := symbolizer.IsPythonEval(frames)
	d.evals[k] = e
	return e
}

// runtimeLocation returns the location of a frame the stream's events
// name: a Python frame (its instruction's offset as the address, no
// mapping), or the frames a JIT runtime's reader named at a native
// frame's address (in that address's mapping, if any).
func (b *Builder) runtimeLocation(d *dict, pid uint32, t int64, f *symbolizer.StackFrame) int32 {
	ft := FrameJIT
	switch f.Runtime {
	case symbolizer.RuntimePython:
		ft = FrameCPython
	case symbolizer.RuntimeV8:
		ft = FrameV8JS
	case symbolizer.RuntimeHotSpot:
		ft = FrameJVM
	}
	var mi int32
	if f.Runtime != symbolizer.RuntimePython {
		if m := b.db.Lookup(pid, f.PC, t); m != nil {
			mi = d.mapping(m)
		}
	}
	return d.location(mi, f.PC, ft, f.Frames)
}

// jitFrameType guesses the runtime of JIT code published in a perf map
// or jitdump file, which do not say it, from the process's executable
// and the runtime's naming.
func (b *Builder) jitFrameType(pid uint32, name string) string {
	if strings.HasPrefix(name, "py::") { // python -X perf's trampolines
		return FrameCPython
	}
	exe := b.procs[pid].Name
	for _, a := range b.procs[pid].Attrs {
		if a.Key == attrExecutablePath && a.Value != "" {
			exe = a.Value
		}
	}
	switch exe = path.Base(exe); {
	case exe == "node" || exe == "nodejs" || exe == "deno" || exe == "bun" || exe == "d8":
		return FrameV8JS
	case exe == "java" || strings.HasPrefix(exe, "java"):
		return FrameJVM
	case exe == "dotnet":
		return FrameDotnet
	case strings.HasPrefix(exe, "python"):
		return FrameCPython
	}
	return FrameJIT
}

const attrExecutablePath = "process.executable.path"

// location returns the location table index of a location with this
// content, adding it if new: the table holds each content once.
func (x *dict) location(mapping int32, addr uint64, frameType string, frames []symbolizer.Frame) int32 {
	ft := x.strAttr(AttrFrameType, frameType)
	key := binary.AppendUvarint(x.locKey[:0], uint64(mapping))
	key = binary.AppendUvarint(key, addr)
	key = binary.AppendUvarint(key, uint64(ft))
	fns := x.fnBuf[:0]
	for _, f := range frames {
		if f.Function == "" {
			continue
		}
		fi := x.function(f.Function, f.File)
		fns = append(fns, fi)
		key = binary.AppendUvarint(key, uint64(fi))
		key = binary.AppendUvarint(key, uint64(max(f.Line, 0)))
		key = binary.AppendUvarint(key, uint64(max(f.Column, 0)))
	}
	x.locKey, x.fnBuf = key, fns
	if i, ok := x.content[string(key)]; ok {
		return i
	}
	i := int32(x.d.LocationTable().Len())
	loc := x.d.LocationTable().AppendEmpty()
	loc.SetMappingIndex(mapping)
	loc.SetAddress(addr)
	loc.AttributeIndices().Append(ft)
	n := 0
	for _, f := range frames {
		if f.Function == "" {
			continue
		}
		l := loc.Lines().AppendEmpty()
		l.SetFunctionIndex(fns[n])
		l.SetLine(int64(max(f.Line, 0)))
		l.SetColumn(int64(max(f.Column, 0)))
		n++
	}
	x.content[string(key)] = i
	return i
}
