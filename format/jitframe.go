package format

// JITRuntime names the runtime whose own metadata named a JITFunc
// (SPEC.md §6.26).
type JITRuntime uint8

const (
	JITRuntimeUnknown JITRuntime = 0
	JITRuntimeV8      JITRuntime = 1 // V8 (Node.js), from its v8dbg_ post-mortem tables
	JITRuntimeHotSpot JITRuntime = 2 // HotSpot (OpenJDK), from its serviceability tables
)

func (r JITRuntime) String() string {
	switch r {
	case JITRuntimeV8:
		return "v8"
	case JITRuntimeHotSpot:
		return "hotspot"
	}
	return "unknown"
}

// JITFunc is an interned function of a JIT runtime, named from the
// runtime's own metadata (a V8 SharedFunctionInfo and its Script, a
// HotSpot Method): JITFrames refer to it by ID.
type JITFunc struct {
	ID      uint64
	Runtime JITRuntime
	Name    string // the function's name: "mix", "Shop.handle"
	File    string // its script or source file: "/srv/shop.js", "Shop.java"; "" unknown
}

// JITTier says which of a runtime's tiers ran a frame (SPEC.md §6.25).
type JITTier uint8

const (
	JITTierUnknown     JITTier = 0
	JITTierInterpreted JITTier = 1 // V8 Ignition, the HotSpot interpreter
	JITTierBaseline    JITTier = 2 // V8 Sparkplug, HotSpot C1
	JITTierOptimized   JITTier = 3 // V8 Maglev and TurboFan, HotSpot C2
	JITTierStub        JITTier = 4 // a builtin or stub of the runtime
)

func (t JITTier) String() string {
	switch t {
	case JITTierInterpreted:
		return "interpreted"
	case JITTierBaseline:
		return "baseline"
	case JITTierOptimized:
		return "optimized"
	case JITTierStub:
		return "stub"
	}
	return "unknown"
}

// JITFrame is one frame of a JIT runtime in a sample: the function and
// source line it was at, and the native frame it names, by that frame's
// address (the interrupted pc for the leaf, a return address above it).
// Frames a compiler inlined into one native frame share its PC; all but
// the outermost carry Inlined.
type JITFrame struct {
	PC      uint64
	Func    uint64 // JITFunc id
	Line    uint32 // 1-based; 0 unknown
	Tier    JITTier
	Inlined bool // inlined into the next frame (rootward): the same native frame
}

// WriteJITFunc appends a JITFunc event defining e.ID.
func (w *Writer) WriteJITFunc(e *JITFunc) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindJITFunc)
	w.uv(e.ID)
	w.buf = append(w.buf, byte(e.Runtime))
	w.str(e.Name)
	w.str(e.File)
	return w.end(lp)
}

// jitFrames appends a PyStack's JIT frames (SPEC.md §6.25).
func (w *Writer) jitFrames(fs []JITFrame) {
	w.uv(uint64(len(fs)))
	var prev uint64
	for i := range fs {
		f := &fs[i]
		w.buf = appendZigzag(w.buf, int64(f.PC-prev))
		prev = f.PC
		w.uv(f.Func)
		w.uv(uint64(f.Line))
		flags := byte(f.Tier) & 7
		if f.Inlined {
			flags |= 8
		}
		w.buf = append(w.buf, flags)
	}
}

func (r *Reader) decodeJITFunc(d *decoder, f *JITFunc) {
	f.ID = d.uv()
	f.Runtime = JITRuntime(d.byte())
	f.Name = d.str()
	f.File = d.str()
}

// decodeJITFrames decodes a PyStack's JIT frames, reusing r.jitFrames.
func (r *Reader) decodeJITFrames(d *decoder) []JITFrame {
	n := d.uv()
	if n > uint64(len(d.b))/4 { // every frame takes at least four bytes
		d.fail("jit frame count exceeds event size")
		return nil
	}
	fs := r.jitFrames[:0]
	var pc uint64
	for i := uint64(0); i < n && d.err == nil; i++ {
		pc += uint64(d.zz())
		f := JITFrame{PC: pc, Func: d.uv(), Line: d.u32()}
		flags := d.byte()
		f.Tier, f.Inlined = JITTier(flags&7), flags&8 != 0
		fs = append(fs, f)
	}
	r.jitFrames = fs
	return fs
}
