package pdb

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// FormatError reports malformed PDB data: the file, the stream and the
// byte offset within that stream (Stream is -1 for offsets in the file
// itself, -2 for the stream directory).
type FormatError struct {
	File   string
	Stream int
	Offset int64
	Msg    string
}

func (e *FormatError) Error() string {
	switch e.Stream {
	case -1:
		return fmt.Sprintf("pdb: %s: offset %#x: %s", e.File, e.Offset, e.Msg)
	case -2:
		return fmt.Sprintf("pdb: %s: stream directory offset %#x: %s", e.File, e.Offset, e.Msg)
	}
	return fmt.Sprintf("pdb: %s: stream %d offset %#x: %s", e.File, e.Stream, e.Offset, e.Msg)
}

// reader is a sticky-error little-endian decoder over one stream: after
// the first short read every method returns zero values and err stays set.
type reader struct {
	b      []byte
	off    int
	file   string
	stream int
	err    error
}

func newReader(b []byte, file string, stream int) *reader {
	return &reader{b: b, file: file, stream: stream}
}

func (r *reader) fail(n int) {
	if r.err == nil {
		r.err = &FormatError{File: r.file, Stream: r.stream, Offset: int64(r.off), Msg: fmt.Sprintf("need %d bytes, %d left", n, len(r.b)-r.off)}
	}
	r.off = len(r.b)
}

func (r *reader) errorf(format string, args ...any) {
	if r.err == nil {
		r.err = &FormatError{File: r.file, Stream: r.stream, Offset: int64(r.off), Msg: fmt.Sprintf(format, args...)}
	}
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) bytes(n int) []byte {
	if n < 0 || n > len(r.b)-r.off {
		r.fail(n)
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

func (r *reader) skip(n int) { r.bytes(n) }

func (r *reader) u8() uint8 {
	p := r.bytes(1)
	if p == nil {
		return 0
	}
	return p[0]
}

func (r *reader) u16() uint16 {
	p := r.bytes(2)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(p)
}

func (r *reader) u32() uint32 {
	p := r.bytes(4)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p)
}

// cstring reads a NUL-terminated string.
func (r *reader) cstring() string {
	if r.off >= len(r.b) {
		r.fail(1)
		return ""
	}
	i := bytes.IndexByte(r.b[r.off:], 0)
	if i < 0 {
		r.errorf("unterminated string")
		r.off = len(r.b)
		return ""
	}
	s := string(r.b[r.off : r.off+i])
	r.off += i + 1
	return s
}

func (r *reader) align(n int) {
	if rem := r.off % n; rem != 0 {
		r.off = min(len(r.b), r.off+n-rem)
	}
}

// cstr returns the NUL-terminated string at the start of p (all of p when
// there is no NUL).
func cstr(p []byte) string {
	if i := bytes.IndexByte(p, 0); i >= 0 {
		p = p[:i]
	}
	return string(p)
}

func le16(p []byte) uint16 { return binary.LittleEndian.Uint16(p) }
func le32(p []byte) uint32 { return binary.LittleEndian.Uint32(p) }
