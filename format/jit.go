package format

// JITSource says where the recorder learned about a piece of JIT code.
type JITSource uint8

const (
	JITSourceUnknown JITSource = 0
	JITSourcePerfMap JITSource = 1 // a perf map, /tmp/perf-PID.map
	JITSourceJitdump JITSource = 2 // a jitdump file, jit-PID.dump
)

func (s JITSource) String() string {
	switch s {
	case JITSourcePerfMap:
		return "perfmap"
	case JITSourceJitdump:
		return "jitdump"
	}
	return "unknown"
}

// JITCode says that a JIT compiler (or an interpreter's trampoline
// generator) placed code named Name at [Addr, Addr+Size) in process Pid.
// The code is valid from Time until a later JITCode overlaps its range or
// a JITUnload covers it (SPEC.md §6.20 says how a reader picks an entry
// for an address at a sample's time).
type JITCode struct {
	Time   int64
	Pid    uint32
	Addr   uint64
	Size   uint64
	Name   uint64 // String id of the runtime's name for the code
	Source JITSource
	// Code is a copy of the machine code, when the recorder was asked to
	// keep it; nil otherwise.
	Code []byte
	// Lines maps code offsets to source positions (jitdump debug info),
	// in the order the runtime gave them; nil if none.
	Lines []JITLine
}

// JITLine says that the code from Addr+Offset on comes from source
// position File:Line:Column (until the next entry's offset).
type JITLine struct {
	Offset uint64
	Line   uint32
	Column uint32 // 0 if unknown
	File   uint64 // String id of the source file or script name
}

// JITUnload says that the JIT code overlapping [Addr, Addr+Size) in
// process Pid stops being valid at Time (freed, or moved elsewhere: a
// move is a JITUnload of the old range and a JITCode at the new one).
type JITUnload struct {
	Time int64
	Pid  uint32
	Addr uint64
	Size uint64
}

// JITCode field presence bits (SPEC.md §6.20).
const (
	jitHasCode  = 1 << 0
	jitHasLines = 1 << 1
)

// WriteJITCode appends a JITCode event. Like the other writers it does not
// allocate once the chunk buffer is warm.
func (w *Writer) WriteJITCode(e *JITCode) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindJITCode)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.uv(e.Addr)
	w.uv(e.Size)
	w.uv(e.Name)
	w.buf = append(w.buf, byte(e.Source))
	var present uint64
	if e.Code != nil {
		present |= jitHasCode
	}
	if len(e.Lines) > 0 {
		present |= jitHasLines
	}
	w.uv(present)
	if present&jitHasCode != 0 {
		w.bytesField(e.Code)
	}
	if present&jitHasLines != 0 {
		w.uv(uint64(len(e.Lines)))
		var prev uint64
		for i := range e.Lines {
			l := &e.Lines[i]
			w.buf = appendZigzag(w.buf, int64(l.Offset-prev))
			prev = l.Offset
			w.uv(uint64(l.Line))
			w.uv(uint64(l.Column))
			w.uv(l.File)
		}
	}
	return w.end(lp)
}

// WriteJITUnload appends a JITUnload event.
func (w *Writer) WriteJITUnload(e JITUnload) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindJITUnload)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.uv(e.Addr)
	w.uv(e.Size)
	return w.end(lp)
}

// decodeJITCode decodes a JITCode body into j, reusing r.lines.
func (r *Reader) decodeJITCode(d *decoder, j *JITCode) {
	j.Time = r.time(d)
	j.Pid = d.u32()
	j.Addr = d.uv()
	j.Size = d.uv()
	j.Name = d.uv()
	j.Source = JITSource(d.byte())
	present := d.uv()
	j.Code, j.Lines = nil, nil
	if present&jitHasCode != 0 {
		j.Code = d.bytes()
		if j.Code == nil && d.err == nil {
			j.Code = []byte{}
		}
	}
	if present&jitHasLines != 0 {
		n := d.uv()
		if n > uint64(len(d.b))/4 { // every entry takes at least four bytes
			d.fail("line count exceeds event size")
			n = 0
		}
		lines := r.lines[:0]
		var prev uint64
		for i := uint64(0); i < n && d.err == nil; i++ {
			prev += uint64(d.zz())
			lines = append(lines, JITLine{Offset: prev, Line: d.u32(), Column: d.u32(), File: d.uv()})
		}
		r.lines = lines
		j.Lines = lines
	}
}
