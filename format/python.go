package format

// PyLineTable names the encoding of a PyCode's line table: the CPython
// version that wrote it decides (SPEC.md §6.24).
type PyLineTable uint8

const (
	PyLineTableNone      PyLineTable = 0 // no table: every instruction is on FirstLine
	PyLineTableLnotab    PyLineTable = 1 // co_lnotab, CPython 3.8–3.9
	PyLineTable310       PyLineTable = 2 // co_linetable, CPython 3.10
	PyLineTableLocations PyLineTable = 3 // co_linetable (location table), CPython 3.11 and later
)

func (t PyLineTable) String() string {
	switch t {
	case PyLineTableNone:
		return "none"
	case PyLineTableLnotab:
		return "lnotab"
	case PyLineTable310:
		return "linetable310"
	case PyLineTableLocations:
		return "locations"
	}
	return "unknown"
}

// PyCode is an interned Python code object: a function's (or module's, or
// class body's) name, file, first line and line table, as the interpreter
// held them. PyStack frames refer to it by ID.
type PyCode struct {
	ID        uint64
	Name      string // co_qualname (3.11+) or co_name
	File      string // co_filename
	FirstLine uint32 // co_firstlineno
	Table     PyLineTable
	Lines     []byte // the line table's bytes, in Table's encoding
}

// PyFrame is one Python frame of a sample: the code it ran and the byte
// offset in the code's bytecode of the instruction it was executing.
type PyFrame struct {
	Code   uint64 // PyCode id
	Offset uint32 // byte offset of the current instruction in co_code
	// Entry says that this frame was the first one run by its C-level
	// call of the interpreter loop (_PyEval_EvalFrameDefault): the
	// frames from one Entry frame up to the next belong to one native
	// evaluation frame.
	Entry bool
}

// PyStack is an interned list of a thread's managed frames, referred to
// by Sample.Python: its Python frames, leaf first, with the thread's hold
// on the interpreter's GIL, and the frames of a JIT runtime (V8, HotSpot)
// that named some of its native frames.
type PyStack struct {
	ID     uint64
	Frames []PyFrame
	// GIL says whether the thread held the GIL or waited for it when its
	// frames were read (SPEC.md §6.25, appended; PyGILNone in older
	// streams).
	GIL PyGIL
	// JIT are the frames a JIT runtime's reader named (SPEC.md §6.25,
	// appended after GIL), leaf first.
	JIT []JITFrame
}

// PyGIL is a Python thread's relation to its interpreter's global
// interpreter lock (SPEC.md §6.25).
type PyGIL uint8

const (
	PyGILNone    PyGIL = 0 // not held, not waited for, or not known
	PyGILHeld    PyGIL = 1 // the thread held the GIL
	PyGILWaiting PyGIL = 2 // the thread was blocked taking the GIL (snapshots)
)

func (g PyGIL) String() string {
	switch g {
	case PyGILNone:
		return "none"
	case PyGILHeld:
		return "held"
	case PyGILWaiting:
		return "waiting"
	}
	return "unknown"
}

// WritePyCode appends a PyCode event defining e.ID.
func (w *Writer) WritePyCode(e *PyCode) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindPyCode)
	w.uv(e.ID)
	w.str(e.Name)
	w.str(e.File)
	w.uv(uint64(e.FirstLine))
	w.buf = append(w.buf, byte(e.Table))
	w.bytesField(e.Lines)
	return w.end(lp)
}

// WritePyStack appends a PyStack event defining id, its frames and the
// thread's hold on the GIL (written only when not PyGILNone). It does not
// allocate once the chunk buffer is warm.
func (w *Writer) WritePyStack(id uint64, frames []PyFrame, gil PyGIL) error {
	return w.WriteFrames(id, frames, gil, nil)
}

// WriteFrames appends a PyStack event defining id: the Python frames, the
// hold on the GIL and the JIT runtime frames (written only when there are
// some). It does not allocate once the chunk buffer is warm.
func (w *Writer) WriteFrames(id uint64, frames []PyFrame, gil PyGIL, jit []JITFrame) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindPyStack)
	w.uv(id)
	w.uv(uint64(len(frames)))
	for i := range frames {
		f := &frames[i]
		w.uv(f.Code)
		where := uint64(f.Offset) << 1
		if f.Entry {
			where |= 1
		}
		w.uv(where)
	}
	if gil != PyGILNone || len(jit) > 0 {
		w.buf = append(w.buf, byte(gil))
	}
	if len(jit) > 0 {
		w.jitFrames(jit)
	}
	return w.end(lp)
}

func (r *Reader) decodePyCode(d *decoder, c *PyCode) {
	c.ID = d.uv()
	c.Name = d.str()
	c.File = d.str()
	c.FirstLine = d.u32()
	c.Table = PyLineTable(d.byte())
	c.Lines = d.bytes()
}

// decodePyStack decodes a PyStack body into s, reusing r.pyFrames.
func (r *Reader) decodePyStack(d *decoder, s *PyStack) {
	s.ID = d.uv()
	n := d.uv()
	if n > uint64(len(d.b))/2 { // every frame takes at least two bytes
		d.fail("python frame count exceeds event size")
		n = 0
	}
	frames := r.pyFrames[:0]
	for i := uint64(0); i < n && d.err == nil; i++ {
		code := d.uv()
		where := d.uv()
		if where>>1 > 1<<32-1 {
			d.fail("python frame offset exceeds 32 bits")
		}
		frames = append(frames, PyFrame{Code: code, Offset: uint32(where >> 1), Entry: where&1 != 0})
	}
	r.pyFrames = frames
	s.Frames = frames
	s.GIL = PyGILNone
	if len(d.b) > 0 && d.err == nil { // appended with GIL marking, optional
		s.GIL = PyGIL(d.byte())
	}
	s.JIT = nil
	if len(d.b) > 0 && d.err == nil { // appended with JIT frames, optional
		s.JIT = r.decodeJITFrames(d)
	}
}
