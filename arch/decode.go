package arch

import (
	"encoding/binary"
	"fmt"
)

// FormatError reports malformed unwind data: which file and section, at
// which byte offset of the section, and what was wrong.
type FormatError struct {
	File    string // path, or "" when parsing bytes
	Section string // ".eh_frame", ".debug_frame", ".eh_frame_hdr"
	Off     int64  // byte offset in the section
	Msg     string
}

func (e *FormatError) Error() string {
	f := e.File
	if f == "" {
		f = "<bytes>"
	}
	return fmt.Sprintf("arch: %s: %s+%#x: %s", f, e.Section, e.Off, e.Msg)
}

// reader is a sticky-error little-endian decoder over one section: after
// the first error every read returns zero, so callers check err once.
type reader struct {
	data []byte
	off  int
	err  *FormatError
	file string
	sect string
}

func (r *reader) fail(off int, format string, args ...any) {
	if r.err == nil {
		r.err = &FormatError{File: r.file, Section: r.sect, Off: int64(off), Msg: fmt.Sprintf(format, args...)}
	}
	r.off = len(r.data)
}

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || n > len(r.data)-r.off {
		r.fail(r.off, "truncated: need %d bytes, %d left", n, len(r.data)-r.off)
		return false
	}
	return true
}

func (r *reader) u8() uint8 {
	if !r.need(1) {
		return 0
	}
	v := r.data[r.off]
	r.off++
	return v
}

func (r *reader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.data[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.data[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.data[r.off:])
	r.off += 8
	return v
}

func (r *reader) bytes(n int) []byte {
	if !r.need(n) {
		return nil
	}
	b := r.data[r.off : r.off+n : r.off+n]
	r.off += n
	return b
}

func (r *reader) cstring() string {
	if r.err != nil {
		return ""
	}
	for i := r.off; i < len(r.data); i++ {
		if r.data[i] == 0 {
			s := string(r.data[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.fail(r.off, "unterminated string")
	return ""
}

func (r *reader) uleb() uint64 {
	var v uint64
	var shift uint
	start := r.off
	for {
		b := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			return v
		}
		if shift > 70 {
			r.fail(start, "LEB128 longer than 10 bytes")
			return 0
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	var b byte
	start := r.off
	for {
		b = r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			break
		}
		if shift > 70 {
			r.fail(start, "LEB128 longer than 10 bytes")
			return 0
		}
	}
	if shift < 64 && b&0x40 != 0 {
		v |= -1 << shift
	}
	return v
}

// Pointer encodings of .eh_frame (LSB 5.0, "DWARF Exception Header
// Encoding").
const (
	peAbsptr  = 0x00
	peUleb128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSleb128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c

	pePcrel    = 0x10
	peTextrel  = 0x20
	peDatarel  = 0x30
	peFuncrel  = 0x40
	peAligned  = 0x50
	peIndirect = 0x80
	peOmit     = 0xff
)

// encoded reads a pointer in encoding enc. secAddr is the section's
// virtual address (for pcrel), dataAddr the base for datarel (the address
// of .eh_frame_hdr in a header, else 0: unsupported). Indirect pointers are
// returned undereferenced: no caller here needs their target.
func (r *reader) encoded(enc byte, ptrSize int, secAddr, dataAddr uint64) uint64 {
	if enc == peOmit {
		return 0
	}
	pos := r.off
	var v uint64
	switch enc & 0x0f {
	case peAbsptr:
		if ptrSize == 4 {
			v = uint64(r.u32())
		} else {
			v = r.u64()
		}
	case peUleb128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peUdata8:
		v = r.u64()
	case peSleb128:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	case peSdata8:
		v = r.u64()
	default:
		r.fail(pos, "unknown pointer encoding %#x", enc)
		return 0
	}
	switch enc & 0x70 {
	case 0:
	case pePcrel:
		v += secAddr + uint64(pos)
	case peDatarel:
		if dataAddr == 0 {
			r.fail(pos, "datarel pointer encoding %#x without a data base", enc)
			return 0
		}
		v += dataAddr
	default:
		r.fail(pos, "unsupported pointer encoding %#x", enc)
		return 0
	}
	return v
}
