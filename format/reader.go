package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// FormatError reports a stream that is not a rawstack stream or has a
// broken header. It is fatal: nothing after it can be read.
type FormatError struct {
	Name   string // file name, if known
	Offset int64
	Msg    string
}

func (e *FormatError) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("format: %s: offset %d: %s", e.Name, e.Offset, e.Msg)
	}
	return fmt.Sprintf("format: offset %d: %s", e.Offset, e.Msg)
}

// ChunkError reports a chunk that was skipped because it is corrupt or
// truncated. It is not fatal: the next call to [Reader.Next] goes on with the
// next intact chunk. Offset is where the bad bytes start; Skipped is how many
// bytes were passed over (for a truncated final chunk, what was left).
type ChunkError struct {
	Name    string
	Offset  int64
	Skipped int64
	Msg     string
}

func (e *ChunkError) Error() string {
	name := ""
	if e.Name != "" {
		name = e.Name + ": "
	}
	return fmt.Sprintf("format: %schunk at offset %d: %s (%d bytes skipped)", name, e.Offset, e.Msg, e.Skipped)
}

// ReaderStats counts what a Reader has seen so far.
type ReaderStats struct {
	Chunks        int64 // intact chunks read
	ChunksSkipped int64 // chunks reported as ChunkError
	BytesSkipped  int64
	Events        int64
	EventsUnknown int64 // events of kinds this version does not know, skipped
}

// Reader decodes a stream event by event. It reads the underlying
// io.Reader sequentially (a pipe or socket works) and holds at most one
// chunk, plus read-ahead, in memory.
type Reader struct {
	r      io.Reader
	closer io.Closer
	name   string
	hdr    Header

	buf  []byte // buffered stream bytes; buf[0] is at stream offset base
	base int64
	pos  int // next unread byte in buf
	eof  bool
	rerr error // read error other than EOF

	// current chunk payload: buf[cpos:cend], events decoded from cpos on
	inChunk bool
	cpos    int
	cend    int

	lastTime  int64
	lastPid   uint32
	lastTid   uint32
	lastStack uint64
	lastCPU1  uint32

	ev        Event
	pcs       []uint64
	regs      []uint64
	lines     []JITLine
	pyFrames  []PyFrame
	jitFrames []JITFrame
	stats     ReaderStats
}

// Open opens the stream in the named file. Close the Reader when done.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, err := newReader(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closer = f
	return r, nil
}

// NewReader reads the stream header from r and returns a Reader for its events.
func NewReader(r io.Reader) (*Reader, error) { return newReader(r, "") }

func newReader(r io.Reader, name string) (*Reader, error) {
	rd := &Reader{r: r, name: name, buf: make([]byte, 0, 64<<10)}
	if err := rd.readHeader(); err != nil {
		return nil, err
	}
	return rd, nil
}

// Close closes the file opened by [Open]; it does nothing for a Reader made by NewReader.
func (r *Reader) Close() error {
	if r.closer != nil {
		return r.closer.Close()
	}
	return nil
}

// Name returns the path of the file [Open] opened, or "" for a Reader made
// by NewReader.
func (r *Reader) Name() string { return r.name }

// Header returns the stream header.
func (r *Reader) Header() Header { return r.hdr }

// Stats returns counts of what has been read so far.
func (r *Reader) Stats() ReaderStats { return r.stats }

// Offset returns the stream offset of the next byte to be decoded.
func (r *Reader) Offset() int64 {
	if r.inChunk {
		return r.base + int64(r.cpos)
	}
	return r.base + int64(r.pos)
}

// fill makes at least n bytes available from r.pos, unless the stream ends
// first. It reports whether n bytes are available.
func (r *Reader) fill(n int) bool {
	for len(r.buf)-r.pos < n {
		if r.eof || r.rerr != nil {
			return false
		}
		if r.pos > 0 { // drop consumed bytes
			k := copy(r.buf, r.buf[r.pos:])
			r.base += int64(r.pos)
			r.buf = r.buf[:k]
			r.pos = 0
		}
		if cap(r.buf) < n { // n never exceeds MaxChunkSize+ChunkHeaderSize
			nb := make([]byte, len(r.buf), max(n, min(2*cap(r.buf), MaxChunkSize+ChunkHeaderSize)))
			copy(nb, r.buf)
			r.buf = nb
		}
		m, err := r.r.Read(r.buf[len(r.buf):cap(r.buf)])
		r.buf = r.buf[:len(r.buf)+m]
		if err == io.EOF {
			r.eof = true
		} else if err != nil {
			r.rerr = err
		}
	}
	return true
}

func (r *Reader) readHeader() error {
	ok := r.fill(HeaderSize)
	if !ok {
		if r.rerr != nil {
			return r.rerr
		}
		return &FormatError{Name: r.name, Offset: 0, Msg: fmt.Sprintf("stream too short for a header (%d bytes)", len(r.buf))}
	}
	b := r.buf[r.pos:]
	if string(b[:8]) != Magic {
		return &FormatError{Name: r.name, Offset: 0, Msg: fmt.Sprintf("bad magic %q, not a rawstack stream", b[:8])}
	}
	v := binary.LittleEndian.Uint16(b[8:])
	if v != Version1 {
		return &FormatError{Name: r.name, Offset: 8, Msg: fmt.Sprintf("unsupported version %d (this reader reads version %d)", v, Version1)}
	}
	hl := int(binary.LittleEndian.Uint16(b[10:]))
	if hl < HeaderSize || hl > MaxHeaderSize {
		return &FormatError{Name: r.name, Offset: 10, Msg: fmt.Sprintf("header length %d out of range [%d, %d]", hl, HeaderSize, MaxHeaderSize)}
	}
	r.hdr = Header{
		Version:     v,
		BigEndian:   b[12]&1 != 0,
		PointerSize: b[13],
		OS:          OS(b[14]),
		Arch:        Arch(b[15]),
		Clock:       Clock(b[16]),
	}
	if ps := r.hdr.PointerSize; ps != 4 && ps != 8 {
		return &FormatError{Name: r.name, Offset: 13, Msg: fmt.Sprintf("pointer size %d, want 4 or 8", ps)}
	}
	if !r.fill(hl) {
		return &FormatError{Name: r.name, Offset: int64(HeaderSize), Msg: fmt.Sprintf("stream ends inside its %d-byte header", hl)}
	}
	r.pos += hl
	return nil
}

// Next returns the next event. The Event and the slices in it are reused
// by the next call. At the end of the stream Next returns io.EOF. A corrupt
// or truncated chunk yields a *ChunkError; call Next again to go on with
// the next intact chunk. Other errors (a failing io.Reader) are final.
func (r *Reader) Next() (*Event, error) {
	for {
		if r.inChunk {
			if r.cpos < r.cend {
				ev, err := r.decodeEvent()
				if err != nil {
					return nil, err
				}
				if ev != nil {
					return ev, nil
				}
				continue
			}
			r.inChunk = false
			r.pos = r.cend
		}
		if err := r.nextChunk(); err != nil {
			return nil, err
		}
	}
}

// nextChunk positions the Reader on the payload of the next intact chunk.
func (r *Reader) nextChunk() error {
	if !r.fill(1) {
		if r.rerr != nil {
			return r.rerr
		}
		return io.EOF
	}
	start := r.base + int64(r.pos)
	if !r.fill(ChunkHeaderSize) {
		if r.rerr != nil {
			return r.rerr
		}
		n := len(r.buf) - r.pos
		r.pos = len(r.buf)
		return r.skipped(start, int64(n), "truncated chunk header")
	}
	h := r.buf[r.pos : r.pos+ChunkHeaderSize]
	if string(h[:4]) != ChunkMagic {
		return r.resync(start, "bad chunk magic")
	}
	n := binary.LittleEndian.Uint32(h[4:])
	if n > MaxChunkSize {
		return r.resync(start, fmt.Sprintf("chunk length %d exceeds the maximum %d", n, MaxChunkSize))
	}
	if !r.fill(ChunkHeaderSize + int(n)) {
		if r.rerr != nil {
			return r.rerr
		}
		// The stream ends inside this chunk. If a later chunk magic is in
		// what is left, the length was corrupt: resync to it.
		if bytes.Index(r.buf[r.pos+4:], []byte(ChunkMagic)) >= 0 {
			return r.resync(start, fmt.Sprintf("chunk length %d runs past the end of the stream", n))
		}
		left := len(r.buf) - r.pos
		r.pos = len(r.buf)
		return r.skipped(start, int64(left), fmt.Sprintf("truncated: %d of %d bytes", left, ChunkHeaderSize+int(n)))
	}
	h = r.buf[r.pos : r.pos+ChunkHeaderSize] // fill may have moved the buffer
	payload := r.buf[r.pos+ChunkHeaderSize : r.pos+ChunkHeaderSize+int(n)]
	if crc32c(payload) != binary.LittleEndian.Uint32(h[8:]) {
		return r.resync(start, "CRC32C mismatch")
	}
	r.inChunk = true
	r.cpos = r.pos + ChunkHeaderSize
	r.cend = r.cpos + int(n)
	r.lastTime, r.lastPid, r.lastTid, r.lastStack, r.lastCPU1 = 0, 0, 0, 0, 0
	r.stats.Chunks++
	return nil
}

// resync skips from the bad chunk at start to the next chunk magic and
// reports the skipped bytes.
func (r *Reader) resync(start int64, msg string) error {
	r.pos++ // never match the bad chunk's own magic again
	for {
		if i := bytes.Index(r.buf[r.pos:], []byte(ChunkMagic)); i >= 0 {
			r.pos += i
			break
		}
		// keep the last 3 bytes: a magic may straddle the read boundary
		if k := len(r.buf) - r.pos - (len(ChunkMagic) - 1); k > 0 {
			r.pos += k
		}
		if !r.fill(len(r.buf) - r.pos + 1) {
			r.pos = len(r.buf)
			break
		}
	}
	return r.skipped(start, r.base+int64(r.pos)-start, msg)
}

func (r *Reader) skipped(start, n int64, msg string) error {
	r.stats.ChunksSkipped++
	r.stats.BytesSkipped += n
	return &ChunkError{Name: r.name, Offset: start, Skipped: n, Msg: msg}
}

// decodeEvent decodes the event at r.cpos. It returns (nil, nil) for an
// event that was skipped silently (never happens today; unknown kinds are
// returned as KindUnknown).
func (r *Reader) decodeEvent() (*Event, error) {
	off := r.base + int64(r.cpos)
	chunk := r.buf[r.cpos:r.cend]
	code := chunk[0]
	blen, n := binary.Uvarint(chunk[1:])
	if n <= 0 || blen > uint64(len(chunk)-1-n) {
		return nil, r.badEvent(off, fmt.Sprintf("event length runs past the chunk (type %d)", code))
	}
	body := chunk[1+n : 1+n+int(blen)]
	r.cpos += 1 + n + int(blen)

	ev := &r.ev
	ev.Code = code
	ev.Offset = off
	ev.Kind = Kind(code)
	d := decoder{b: body}
	switch ev.Kind {
	case KindProcess:
		p := &ev.Process
		p.Time = r.time(&d)
		p.Pid = d.u32()
		p.Ppid = d.u32()
		p.Name = d.str()
		p.Cmdline = d.str()
		p.Attrs = nil     // fresh each time: readers keep Process events
		if len(d.b) > 0 { // appended: optional
			p.Attrs = d.labels(nil)
		}
	case KindProcessEnd:
		p := &ev.ProcessEnd
		p.Time = r.time(&d)
		p.Pid = d.u32()
		p.ExitCode = d.zz()
	case KindClockSync:
		ev.ClockSync.Time = r.time(&d)
		ev.ClockSync.WallNano = d.zz()
	case KindThreadStart:
		t := &ev.ThreadStart
		t.Time = r.time(&d)
		t.Pid = d.u32()
		t.Tid = d.u32()
	case KindThreadName:
		t := &ev.ThreadName
		t.Time = r.time(&d)
		t.Pid = d.u32()
		t.Tid = d.u32()
		t.Name = d.str()
	case KindThreadEnd:
		t := &ev.ThreadEnd
		t.Time = r.time(&d)
		t.Pid = d.u32()
		t.Tid = d.u32()
	case KindModuleLoad:
		m := &ev.ModuleLoad
		*m = ModuleLoad{BuildID: m.BuildID[:0]}
		m.Time = r.time(&d)
		m.Pid = d.u32()
		m.ID = d.uv()
		m.Base = d.uv()
		m.Size = d.uv()
		m.FileOffset = d.uv()
		m.Kind = ModuleKind(d.byte())
		m.Path = d.str()
		present := d.uv()
		if present&modHasBuildID != 0 {
			m.BuildID = append(m.BuildID, d.bytes()...)
		}
		if present&modHasGoBuildID != 0 {
			m.GoBuildID = d.str()
		}
		if present&modHasPDB != 0 {
			copy(m.PDBGUID[:], d.fixed(16))
			m.PDBAge = d.u32()
			m.PDBPath = d.str()
		}
		if present&modHasCodeID != 0 {
			m.TimeDateStamp = binary.LittleEndian.Uint32(d.fixed(4))
			m.SizeOfImage = d.u32()
		}
	case KindModuleUnload:
		m := &ev.ModuleUnload
		m.Time = r.time(&d)
		m.Pid = d.u32()
		m.ID = d.uv()
	case KindString:
		ev.String.ID = d.uv()
		ev.String.Value = d.str()
	case KindStack:
		ev.Stack.ID = d.uv()
		cnt := d.uv()
		if cnt > uint64(len(d.b)) { // every frame takes at least one byte
			d.fail("frame count exceeds event size")
			cnt = 0
		}
		pcs := r.pcs[:0]
		var prev uint64
		for i := uint64(0); i < cnt && d.err == nil; i++ {
			prev += uint64(d.zz())
			pcs = append(pcs, prev)
		}
		r.pcs = pcs
		ev.Stack.PCs = pcs
	case KindLabelSet:
		ls := &ev.LabelSet
		ls.ID = d.uv()
		ls.Labels = d.labels(ls.Labels[:0])
	case KindSample:
		s := &ev.Sample
		head := d.byte()
		s.Flags = SampleFlags(head >> 4)
		s.Time = r.time(&d)
		s.Pid, s.Tid, s.Weight = r.lastPid, r.lastTid, 1
		if head&sampPid != 0 {
			s.Pid = uint32(int64(r.lastPid) + d.zz())
		}
		if head&sampTid != 0 {
			s.Tid = uint32(int64(r.lastTid) + d.zz())
		}
		cpu1 := r.lastCPU1
		if head&sampCPU != 0 {
			cpu1 = d.u32()
		}
		s.CPU = cpu1 - 1
		if head&sampWeight != 0 {
			s.Weight = d.uv()
		}
		s.Stack = r.lastStack + uint64(d.zz())
		r.lastPid, r.lastTid, r.lastCPU1, r.lastStack = s.Pid, s.Tid, cpu1, s.Stack
		s.Goroutine, s.Labels, s.Python, s.Link = 0, 0, 0, SpanLink{}
		if len(d.b) > 0 { // appended in 1.1, optional
			s.Goroutine = d.uv()
			s.Labels = d.uv()
		}
		if len(d.b) > 0 { // appended with PyStack, optional
			s.Python = d.uv()
		}
		if len(d.b) > 0 { // appended with the span link, optional
			copy(s.Link.TraceID[:], d.fixed(16))
			copy(s.Link.SpanID[:], d.fixed(8))
		}
	case KindRawStack:
		s := &ev.RawStack
		s.Time = r.time(&d)
		s.Pid = uint32(int64(r.lastPid) + d.zz())
		s.Tid = uint32(int64(r.lastTid) + d.zz())
		r.lastPid, r.lastTid = s.Pid, s.Tid
		s.CPU = uint32(d.uv()) - 1
		s.Weight = d.uv()
		s.Flags = SampleFlags(d.byte())
		s.Kernel = d.uv()
		s.RegMask = d.uv()
		regs := r.regs[:0]
		for i := popcount(s.RegMask); i > 0 && d.err == nil; i-- {
			regs = append(regs, d.uv())
		}
		r.regs = regs
		s.Regs = regs
		s.StackAddr = d.uv()
		s.Data = d.bytes()
		s.Python, s.Chain = 0, 0
		if len(d.b) > 0 { // appended with PyStack, optional
			s.Python = d.uv()
		}
		if len(d.b) > 0 { // appended with the frame-pointer chain, optional
			s.Chain = d.uv()
		}
	case KindSpanBegin:
		s := &ev.SpanBegin
		s.Time = r.time(&d)
		s.Tid = d.u32()
		s.ID = d.uv()
		s.Parent = d.uv()
		s.Name = d.uv()
		s.Stack = d.uv()
		s.Goroutine, s.GoStart, s.Link = 0, 0, SpanLink{}
		if len(d.b) > 0 { // appended with goroutine tracks, optional
			s.Goroutine = d.uv()
			s.GoStart = d.uv()
		}
		if len(d.b) > 0 {
			copy(s.Link.TraceID[:], d.fixed(16))
			copy(s.Link.SpanID[:], d.fixed(8))
		}
	case KindSpanEnd:
		s := &ev.SpanEnd
		s.Time = r.time(&d)
		s.Tid = d.u32()
		s.ID = d.uv()
	case KindMarker:
		m := &ev.Marker
		m.Time = r.time(&d)
		m.Tid = d.u32()
		m.Name = d.uv()
		m.Stack = d.uv()
		m.Goroutine = 0
		if len(d.b) > 0 { // appended with goroutine tracks, optional
			m.Goroutine = d.uv()
		}
	case KindCounter:
		c := &ev.Counter
		c.Time = r.time(&d)
		c.Name = d.uv()
		c.Value = math.Float64frombits(binary.LittleEndian.Uint64(d.fixed(8)))
	case KindLost:
		l := &ev.Lost
		l.Time = r.time(&d)
		l.Pid = d.u32()
		l.Count = d.uv()
		l.Reason = LostReason(d.byte())
	case KindPyCode:
		r.decodePyCode(&d, &ev.PyCode)
	case KindPyStack:
		r.decodePyStack(&d, &ev.PyStack)
	case KindJITFunc:
		r.decodeJITFunc(&d, &ev.JITFunc)
	case KindJITCode:
		r.decodeJITCode(&d, &ev.JITCode)
	case KindJITUnload:
		u := &ev.JITUnload
		u.Time = r.time(&d)
		u.Pid = d.u32()
		u.Addr = d.uv()
		u.Size = d.uv()
	case KindAlloc:
		r.decodeAlloc(&d, &ev.Alloc)
	case KindFree:
		r.decodeFree(&d, &ev.Free)
	default:
		if code == 0 {
			return nil, r.badEvent(off, "event type 0")
		}
		ev.Kind = KindUnknown
		ev.Unknown = body
		r.stats.EventsUnknown++
	}
	if d.err != nil {
		return nil, r.badEvent(off, fmt.Sprintf("malformed %v event: %v", Kind(code), d.err))
	}
	r.stats.Events++
	return ev, nil
}

// badEvent abandons the rest of the current chunk: an event that cannot be
// decoded in a chunk whose CRC is right means the writer was broken, and the
// delta state after it cannot be trusted.
func (r *Reader) badEvent(off int64, msg string) error {
	skipped := r.base + int64(r.cend) - off
	r.inChunk = false
	r.pos = r.cend
	return r.skipped(off, skipped, msg)
}

func (r *Reader) time(d *decoder) int64 {
	r.lastTime += d.zz()
	return r.lastTime
}

// decoder reads the fields of one event body. Errors are sticky: after the
// first, every read returns zero and the caller checks err once.
type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("body too short")

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = errors.New(msg)
	}
}

func (d *decoder) uv() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		if n == 0 {
			d.err = errShort
		} else {
			d.err = errors.New("varint overflows 64 bits")
		}
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u32() uint32 {
	v := d.uv()
	if v > math.MaxUint32 {
		d.fail("value exceeds 32 bits")
		return 0
	}
	return uint32(v)
}

func (d *decoder) zz() int64 { return unzigzag(d.uv()) }

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = errShort
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

var zeros [16]byte

func (d *decoder) fixed(n int) []byte {
	if d.err != nil {
		return zeros[:n]
	}
	if len(d.b) < n {
		d.err = errShort
		return zeros[:n]
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// bytes returns a length-prefixed byte field, aliasing the chunk buffer.
func (d *decoder) bytes() []byte {
	n := d.uv()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("field length %d exceeds the %d bytes left", n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string { return string(d.bytes()) }

// labels appends a count and that many key/value pairs (LabelSet, Process
// attributes) to ls.
func (d *decoder) labels(ls []Label) []Label {
	cnt := d.uv()
	if cnt > uint64(len(d.b))/2 { // every label takes at least two bytes
		d.fail("label count exceeds event size")
		cnt = 0
	}
	for i := uint64(0); i < cnt && d.err == nil; i++ {
		ls = append(ls, Label{Key: d.str(), Value: d.str()})
	}
	return ls
}
