package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sync"
)

// Version1 is the format version this package writes and reads.
const Version1 = 1

// Magic starts every stream; ChunkMagic starts every chunk.
const (
	Magic      = "RAWSTACK"
	ChunkMagic = "RSCK"
)

// Sizes fixed by the specification.
const (
	HeaderSize      = 20       // bytes of the version-1 header
	MaxHeaderSize   = 4096     // readers reject larger header lengths
	ChunkHeaderSize = 12       // magic + length + CRC32C
	MaxChunkSize    = 16 << 20 // largest chunk payload a reader accepts
	// DefaultChunkSize is the payload size at which the Writer ends a chunk.
	DefaultChunkSize = 64 << 10
)

// The CRC32C tables are built on first use rather than at program start:
// MakeTable costs ~0.2 ms, which a short-lived CLI run notices. A
// sync.Once and a pointer are zero values in the data segment, where a
// package-level sync.OnceValue would be closures made by an init function
// in every program that links the format.
var (
	castagnoliOnce  sync.Once
	castagnoliTable *crc32.Table
)

func castagnoli() *crc32.Table {
	castagnoliOnce.Do(func() { castagnoliTable = crc32.MakeTable(crc32.Castagnoli) })
	return castagnoliTable
}

// crc32c returns the CRC32C of p.
func crc32c(p []byte) uint32 { return crc32.Checksum(p, castagnoli()) }

// ErrEventTooLarge is returned for an event whose encoding exceeds MaxChunkSize.
var ErrEventTooLarge = errors.New("format: event larger than the maximum chunk size")

// ErrClosed is returned by writes to a closed Writer.
var ErrClosed = errors.New("format: writer closed")

// Writer encodes events into a stream. Each call appends one event to the
// current chunk; a chunk is written to the underlying io.Writer, with one
// Write call, when it reaches the chunk size or on [Writer.Flush]. The
// header is written by [NewWriter] with one Write call too, so a fan-out
// io.Writer sees whole chunks.
//
// Writing an event does not allocate once the chunk buffer has grown to its
// working size. A Writer is not safe for concurrent use: serialize calls
// (the tracer owns one goroutine per stream for this).
type Writer struct {
	w         io.Writer
	buf       []byte // chunk header placeholder + payload
	chunkSize int
	err       error
	closed    bool

	// delta state, reset at every chunk start
	lastTime  int64
	lastPid   uint32
	lastTid   uint32
	lastStack uint64
	lastCPU1  uint32 // CPU+1 of the last sample; 0 = unknown

	chunks int64
	bytes  int64
}

// WriterOptions tunes a Writer. The zero value is valid.
type WriterOptions struct {
	// ChunkSize is the payload size at which a chunk is ended. 0 means
	// DefaultChunkSize; values above MaxChunkSize are clamped.
	ChunkSize int
}

// NewWriter writes the stream header h to w and returns a Writer for the
// events. h.Version is set to Version1.
func NewWriter(w io.Writer, h Header, opts *WriterOptions) (*Writer, error) {
	cs := DefaultChunkSize
	if opts != nil && opts.ChunkSize > 0 {
		cs = opts.ChunkSize
	}
	if cs > MaxChunkSize {
		cs = MaxChunkSize
	}
	if h.PointerSize == 0 {
		h.PointerSize = 8
	}
	wr := &Writer{w: w, chunkSize: cs}
	wr.buf = make([]byte, ChunkHeaderSize, cs+ChunkHeaderSize+256)
	hdr := AppendHeader(nil, h)
	n, err := w.Write(hdr)
	wr.bytes += int64(n)
	if err != nil {
		return nil, fmt.Errorf("format: writing header: %w", err)
	}
	return wr, nil
}

// AppendHeader appends the encoding of h (version forced to Version1) to b.
func AppendHeader(b []byte, h Header) []byte {
	b = append(b, Magic...)
	b = binary.LittleEndian.AppendUint16(b, Version1)
	b = binary.LittleEndian.AppendUint16(b, HeaderSize)
	var flags byte
	if h.BigEndian {
		flags |= 1
	}
	b = append(b, flags, h.PointerSize, byte(h.OS), byte(h.Arch), byte(h.Clock), 0, 0, 0)
	return b
}

// Err returns the first error the Writer met, if any.
func (w *Writer) Err() error { return w.err }

// BytesWritten returns the number of bytes handed to the underlying writer.
func (w *Writer) BytesWritten() int64 { return w.bytes }

// Buffered returns the number of payload bytes not yet written.
func (w *Writer) Buffered() int { return len(w.buf) - ChunkHeaderSize }

// Chunks returns the number of chunks written.
func (w *Writer) Chunks() int64 { return w.chunks }

// Flush ends the current chunk, if it holds any event, and writes it.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == ChunkHeaderSize {
		return nil
	}
	payload := w.buf[ChunkHeaderSize:]
	copy(w.buf[0:4], ChunkMagic)
	binary.LittleEndian.PutUint32(w.buf[4:8], uint32(len(payload)))
	binary.LittleEndian.PutUint32(w.buf[8:12], crc32c(payload))
	n, err := w.w.Write(w.buf)
	w.bytes += int64(n)
	w.chunks++
	w.buf = w.buf[:ChunkHeaderSize]
	w.lastTime, w.lastPid, w.lastTid, w.lastStack, w.lastCPU1 = 0, 0, 0, 0, 0
	if err != nil {
		w.err = fmt.Errorf("format: writing chunk %d: %w", w.chunks-1, err)
	}
	return w.err
}

// Close flushes the last chunk. It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	err := w.Flush()
	w.closed = true
	if w.err == nil {
		w.err = ErrClosed
	}
	return err
}

// begin starts an event of type code k and returns the index of its length byte.
func (w *Writer) begin(k Kind) int {
	w.buf = append(w.buf, byte(k), 0)
	return len(w.buf) - 1
}

// end patches the body length of the event begun at lp and ends the chunk
// when it is full.
func (w *Writer) end(lp int) error {
	n := len(w.buf) - lp - 1
	if n < 0x80 {
		w.buf[lp] = byte(n)
	} else {
		extra := uvarintLen(uint64(n)) - 1
		for i := 0; i < extra; i++ {
			w.buf = append(w.buf, 0)
		}
		copy(w.buf[lp+1+extra:], w.buf[lp+1:lp+1+n])
		binary.PutUvarint(w.buf[lp:], uint64(n))
	}
	if len(w.buf)-ChunkHeaderSize > MaxChunkSize {
		// Drop the oversized event; it can never be read back.
		w.buf = w.buf[:lp-1]
		return ErrEventTooLarge
	}
	if len(w.buf)-ChunkHeaderSize >= w.chunkSize {
		return w.Flush()
	}
	return nil
}

func (w *Writer) ok() error {
	if w.err != nil {
		return w.err
	}
	return nil
}

func (w *Writer) time(t int64) {
	w.buf = appendZigzag(w.buf, t-w.lastTime)
	w.lastTime = t
}

func (w *Writer) str(s string) {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s)))
	w.buf = append(w.buf, s...)
}

func (w *Writer) bytesField(b []byte) {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(b)))
	w.buf = append(w.buf, b...)
}

func (w *Writer) uv(v uint64) { w.buf = binary.AppendUvarint(w.buf, v) }

// WriteProcess appends a Process event.
func (w *Writer) WriteProcess(e Process) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindProcess)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.uv(uint64(e.Ppid))
	w.str(e.Name)
	w.str(e.Cmdline)
	if len(e.Attrs) > 0 { // optional: absent means none
		w.labels(e.Attrs)
	}
	return w.end(lp)
}

// WriteProcessEnd appends a ProcessEnd event.
func (w *Writer) WriteProcessEnd(e ProcessEnd) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindProcessEnd)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.buf = appendZigzag(w.buf, e.ExitCode)
	return w.end(lp)
}

// WriteClockSync appends a ClockSync event.
func (w *Writer) WriteClockSync(e ClockSync) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindClockSync)
	w.time(e.Time)
	w.buf = appendZigzag(w.buf, e.WallNano)
	return w.end(lp)
}

// WriteThreadStart appends a ThreadStart event.
func (w *Writer) WriteThreadStart(e ThreadStart) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindThreadStart)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.uv(uint64(e.Tid))
	return w.end(lp)
}

// WriteThreadName appends a ThreadName event.
func (w *Writer) WriteThreadName(e ThreadName) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindThreadName)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.uv(uint64(e.Tid))
	w.str(e.Name)
	return w.end(lp)
}

// WriteThreadEnd appends a ThreadEnd event.
func (w *Writer) WriteThreadEnd(e ThreadEnd) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindThreadEnd)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.uv(uint64(e.Tid))
	return w.end(lp)
}

// Module field presence bits (SPEC.md §6.6).
const (
	modHasBuildID   = 1 << 0
	modHasGoBuildID = 1 << 1
	modHasPDB       = 1 << 2
	modHasCodeID    = 1 << 3
)

// WriteModuleLoad appends a ModuleLoad event.
func (w *Writer) WriteModuleLoad(e *ModuleLoad) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindModuleLoad)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.uv(e.ID)
	w.uv(e.Base)
	w.uv(e.Size)
	w.uv(e.FileOffset)
	w.buf = append(w.buf, byte(e.Kind))
	w.str(e.Path)
	var present uint64
	if len(e.BuildID) > 0 {
		present |= modHasBuildID
	}
	if e.GoBuildID != "" {
		present |= modHasGoBuildID
	}
	if e.HasPDB() {
		present |= modHasPDB
	}
	if e.TimeDateStamp != 0 || e.SizeOfImage != 0 {
		present |= modHasCodeID
	}
	w.uv(present)
	if present&modHasBuildID != 0 {
		w.bytesField(e.BuildID)
	}
	if present&modHasGoBuildID != 0 {
		w.str(e.GoBuildID)
	}
	if present&modHasPDB != 0 {
		w.buf = append(w.buf, e.PDBGUID[:]...)
		w.uv(uint64(e.PDBAge))
		w.str(e.PDBPath)
	}
	if present&modHasCodeID != 0 {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, e.TimeDateStamp)
		w.uv(uint64(e.SizeOfImage))
	}
	return w.end(lp)
}

// WriteModuleUnload appends a ModuleUnload event.
func (w *Writer) WriteModuleUnload(e ModuleUnload) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindModuleUnload)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.uv(e.ID)
	return w.end(lp)
}

// WriteString appends a String event defining interned string id.
func (w *Writer) WriteString(id uint64, s string) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindString)
	w.uv(id)
	w.str(s)
	return w.end(lp)
}

// WriteStack appends a Stack event defining interned stack id with the
// given absolute addresses, leaf first.
func (w *Writer) WriteStack(id uint64, pcs []uint64) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindStack)
	w.uv(id)
	w.uv(uint64(len(pcs)))
	var prev uint64
	for _, pc := range pcs {
		w.buf = appendZigzag(w.buf, int64(pc-prev))
		prev = pc
	}
	return w.end(lp)
}

// Sample head bits (SPEC.md §6.10): which fields differ from the chunk's
// delta state and follow; the high nibble holds the flags.
const (
	sampPid    = 1 << 0
	sampTid    = 1 << 1
	sampCPU    = 1 << 2
	sampWeight = 1 << 3
)

// WriteSample appends a Sample event. Fields equal to the previous
// sample's in the chunk (pid, tid, cpu) and a weight of 1 cost nothing.
func (w *Writer) WriteSample(e Sample) error {
	if err := w.ok(); err != nil {
		return err
	}
	if e.Flags > 0x0f {
		return fmt.Errorf("format: sample flags %#x use undefined bits", e.Flags)
	}
	lp := w.begin(KindSample)
	head := byte(e.Flags) << 4
	if e.Pid != w.lastPid {
		head |= sampPid
	}
	if e.Tid != w.lastTid {
		head |= sampTid
	}
	if e.CPU+1 != w.lastCPU1 {
		head |= sampCPU
	}
	if e.Weight != 1 {
		head |= sampWeight
	}
	w.buf = append(w.buf, head)
	w.time(e.Time)
	if head&sampPid != 0 {
		w.buf = appendZigzag(w.buf, int64(e.Pid)-int64(w.lastPid))
	}
	if head&sampTid != 0 {
		w.buf = appendZigzag(w.buf, int64(e.Tid)-int64(w.lastTid))
	}
	if head&sampCPU != 0 {
		w.uv(uint64(e.CPU + 1)) // NoCPU wraps to 0
	}
	if head&sampWeight != 0 {
		w.uv(e.Weight)
	}
	w.buf = appendZigzag(w.buf, int64(e.Stack-w.lastStack))
	w.lastPid, w.lastTid, w.lastCPU1, w.lastStack = e.Pid, e.Tid, e.CPU+1, e.Stack
	link := !e.Link.IsZero()
	if e.Goroutine != 0 || e.Labels != 0 || e.Python != 0 || link { // optional: absent means 0
		w.uv(e.Goroutine)
		w.uv(e.Labels)
	}
	if e.Python != 0 || link {
		w.uv(e.Python)
	}
	if link {
		w.buf = append(w.buf, e.Link.TraceID[:]...)
		w.buf = append(w.buf, e.Link.SpanID[:]...)
	}
	return w.end(lp)
}

// WriteLabelSet appends a LabelSet event defining id.
func (w *Writer) WriteLabelSet(id uint64, labels []Label) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindLabelSet)
	w.uv(id)
	w.labels(labels)
	return w.end(lp)
}

// labels appends a count and key/value pairs.
func (w *Writer) labels(labels []Label) {
	w.uv(uint64(len(labels)))
	for _, l := range labels {
		w.str(l.Key)
		w.str(l.Value)
	}
}

// WriteRawStack appends a RawStack event. len(e.Regs) must equal the
// number of bits set in e.RegMask.
func (w *Writer) WriteRawStack(e *RawStack) error {
	if err := w.ok(); err != nil {
		return err
	}
	if popcount(e.RegMask) != len(e.Regs) {
		return fmt.Errorf("format: RawStack has %d registers but its mask names %d", len(e.Regs), popcount(e.RegMask))
	}
	lp := w.begin(KindRawStack)
	w.time(e.Time)
	w.buf = appendZigzag(w.buf, int64(e.Pid)-int64(w.lastPid))
	w.buf = appendZigzag(w.buf, int64(e.Tid)-int64(w.lastTid))
	w.lastPid, w.lastTid = e.Pid, e.Tid
	w.uv(uint64(e.CPU + 1))
	w.uv(e.Weight)
	w.buf = append(w.buf, byte(e.Flags))
	w.uv(e.Kernel)
	w.uv(e.RegMask)
	for _, r := range e.Regs {
		w.uv(r)
	}
	w.uv(e.StackAddr)
	w.bytesField(e.Data)
	if e.Python != 0 || e.Chain != 0 { // optional: absent means 0
		w.uv(e.Python)
	}
	if e.Chain != 0 {
		w.uv(e.Chain)
	}
	return w.end(lp)
}

// Span begins and ends and markers are the events a traced program
// writes at the highest rate (every span is two), so they are encoded
// with one capacity check and no per-field append: their bodies are at
// most smallMax bytes, so the length byte is known to be one byte.
const smallMax = 2 + 8*binary.MaxVarintLen64 + 24 // SpanBegin with its link

// small starts a small event of kind k and returns the buffer, extended
// by smallMax bytes, and the offset of the body.
func (w *Writer) small(k Kind) ([]byte, int) {
	n := len(w.buf)
	if cap(w.buf)-n < smallMax {
		w.buf = append(w.buf, make([]byte, smallMax)...)[:n]
	}
	b := w.buf[:n+smallMax]
	b[n] = byte(k)
	return b, n + 2
}

// endSmall sets the length of the small event begun at body-2 and ending
// at i, and ends the chunk when it is full.
func (w *Writer) endSmall(b []byte, body, i int) error {
	b[body-1] = byte(i - body)
	w.buf = b[:i]
	if len(w.buf)-ChunkHeaderSize >= w.chunkSize {
		return w.Flush()
	}
	return nil
}

// putUvarint writes v at b[i:] and returns the offset after it.
func putUvarint(b []byte, i int, v uint64) int {
	for v >= 0x80 {
		b[i] = byte(v) | 0x80
		v >>= 7
		i++
	}
	b[i] = byte(v)
	return i + 1
}

// putTime writes a time as the zigzag delta from the previous one.
func (w *Writer) putTime(b []byte, i int, t int64) int {
	d := t - w.lastTime
	w.lastTime = t
	return putUvarint(b, i, uint64(d<<1)^uint64(d>>63))
}

// WriteSpanBegin appends a SpanBegin event.
func (w *Writer) WriteSpanBegin(e SpanBegin) error {
	if w.err != nil {
		return w.err
	}
	b, body := w.small(KindSpanBegin)
	i := w.putTime(b, body, e.Time)
	i = putUvarint(b, i, uint64(e.Tid))
	i = putUvarint(b, i, e.ID)
	i = putUvarint(b, i, e.Parent)
	i = putUvarint(b, i, e.Name)
	i = putUvarint(b, i, e.Stack)
	if link := !e.Link.IsZero(); e.Goroutine != 0 || e.GoStart != 0 || link { // optional: absent means 0
		i = putUvarint(b, i, e.Goroutine)
		i = putUvarint(b, i, e.GoStart)
		if link {
			i += copy(b[i:], e.Link.TraceID[:])
			i += copy(b[i:], e.Link.SpanID[:])
		}
	}
	return w.endSmall(b, body, i)
}

// WriteSpanEnd appends a SpanEnd event.
func (w *Writer) WriteSpanEnd(e SpanEnd) error {
	if w.err != nil {
		return w.err
	}
	b, body := w.small(KindSpanEnd)
	i := w.putTime(b, body, e.Time)
	i = putUvarint(b, i, uint64(e.Tid))
	i = putUvarint(b, i, e.ID)
	return w.endSmall(b, body, i)
}

// WriteMarker appends a Marker event.
func (w *Writer) WriteMarker(e Marker) error {
	if w.err != nil {
		return w.err
	}
	b, body := w.small(KindMarker)
	i := w.putTime(b, body, e.Time)
	i = putUvarint(b, i, uint64(e.Tid))
	i = putUvarint(b, i, e.Name)
	i = putUvarint(b, i, e.Stack)
	if e.Goroutine != 0 { // optional
		i = putUvarint(b, i, e.Goroutine)
	}
	return w.endSmall(b, body, i)
}

// WriteCounter appends a Counter event.
func (w *Writer) WriteCounter(e Counter) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindCounter)
	w.time(e.Time)
	w.uv(e.Name)
	w.buf = binary.LittleEndian.AppendUint64(w.buf, math.Float64bits(e.Value))
	return w.end(lp)
}

// WriteLost appends a Lost event.
func (w *Writer) WriteLost(e Lost) error {
	if err := w.ok(); err != nil {
		return err
	}
	lp := w.begin(KindLost)
	w.time(e.Time)
	w.uv(uint64(e.Pid))
	w.uv(e.Count)
	w.buf = append(w.buf, byte(e.Reason))
	return w.end(lp)
}

// WriteEvent appends any decoded event; it is how tools copy or filter
// streams. Events of unknown kind are written back with their original code
// and body.
func (w *Writer) WriteEvent(e *Event) error {
	switch e.Kind {
	case KindProcess:
		return w.WriteProcess(e.Process)
	case KindProcessEnd:
		return w.WriteProcessEnd(e.ProcessEnd)
	case KindClockSync:
		return w.WriteClockSync(e.ClockSync)
	case KindThreadStart:
		return w.WriteThreadStart(e.ThreadStart)
	case KindThreadName:
		return w.WriteThreadName(e.ThreadName)
	case KindThreadEnd:
		return w.WriteThreadEnd(e.ThreadEnd)
	case KindModuleLoad:
		return w.WriteModuleLoad(&e.ModuleLoad)
	case KindModuleUnload:
		return w.WriteModuleUnload(e.ModuleUnload)
	case KindString:
		return w.WriteString(e.String.ID, e.String.Value)
	case KindStack:
		return w.WriteStack(e.Stack.ID, e.Stack.PCs)
	case KindSample:
		return w.WriteSample(e.Sample)
	case KindRawStack:
		return w.WriteRawStack(&e.RawStack)
	case KindSpanBegin:
		return w.WriteSpanBegin(e.SpanBegin)
	case KindSpanEnd:
		return w.WriteSpanEnd(e.SpanEnd)
	case KindMarker:
		return w.WriteMarker(e.Marker)
	case KindCounter:
		return w.WriteCounter(e.Counter)
	case KindLost:
		return w.WriteLost(e.Lost)
	case KindJITCode:
		return w.WriteJITCode(&e.JITCode)
	case KindJITUnload:
		return w.WriteJITUnload(e.JITUnload)
	case KindLabelSet:
		return w.WriteLabelSet(e.LabelSet.ID, e.LabelSet.Labels)
	case KindAlloc:
		return w.WriteAlloc(e.Alloc)
	case KindFree:
		return w.WriteFree(e.Free)
	case KindPyCode:
		return w.WritePyCode(&e.PyCode)
	case KindPyStack:
		return w.WriteFrames(e.PyStack.ID, e.PyStack.Frames, e.PyStack.GIL, e.PyStack.JIT)
	case KindJITFunc:
		return w.WriteJITFunc(&e.JITFunc)
	case KindUnknown:
		return w.writeRaw(e.Code, e.Unknown)
	}
	return fmt.Errorf("format: cannot write event of kind %v", e.Kind)
}

func (w *Writer) writeRaw(code uint8, body []byte) error {
	if err := w.ok(); err != nil {
		return err
	}
	if code == 0 {
		return fmt.Errorf("format: invalid event code %d", code)
	}
	lp := w.begin(Kind(code))
	w.buf = append(w.buf, body...)
	return w.end(lp)
}

func appendZigzag(b []byte, v int64) []byte {
	return binary.AppendUvarint(b, uint64(v<<1)^uint64(v>>63))
}

func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func popcount(v uint64) int {
	n := 0
	for v != 0 {
		v &= v - 1
		n++
	}
	return n
}
