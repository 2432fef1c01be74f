package jitfile

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Jitdump constants (perf's tools/perf/Documentation/jitdump-specification.txt).
const (
	JitdumpMagic      = 0x4A695444 // "JiTD" as a native-endian u32
	JitdumpMagicSwap  = 0x4454694A // written by a target of the other byte order
	jitdumpHeaderSize = 40
	recHeaderSize     = 16

	// FlagArchTimestamp says record times are the CPU's timestamp counter,
	// not the clock the profiler chose.
	FlagArchTimestamp = 1 << 0
)

// Record ids.
const (
	RecCodeLoad      = 0
	RecCodeMove      = 1
	RecDebugInfo     = 2
	RecClose         = 3
	RecUnwindingInfo = 4
)

// Caps on what a record may claim.
const (
	// MaxRecord is the largest record accepted; V8 and the JVM agents
	// write code objects well below it. A larger record is skipped.
	MaxRecord = 64 << 20
	// MaxDebugEntries caps the entries of one debug info record.
	MaxDebugEntries = 1 << 20
	// MaxName caps a NUL-terminated name or file name.
	MaxName = 64 << 10
)

// JitdumpHeader is the file header.
type JitdumpHeader struct {
	Version   uint32
	Size      uint32 // header size in bytes, at least 40
	ElfMach   uint32
	Pid       uint32
	Timestamp uint64
	Flags     uint64
}

// ParseJitdumpHeader parses the header at the start of a jitdump file.
// It needs at least 40 bytes and the whole header (Size bytes) in data.
func ParseJitdumpHeader(file string, data []byte) (JitdumpHeader, error) {
	var h JitdumpHeader
	if len(data) < jitdumpHeaderSize {
		return h, &FormatError{file, 0, fmt.Sprintf("header needs %d bytes, have %d", jitdumpHeaderSize, len(data))}
	}
	le := binary.LittleEndian
	switch m := le.Uint32(data); m {
	case JitdumpMagic:
	case JitdumpMagicSwap:
		return h, &FormatError{file, 0, "big-endian jitdump files are not supported"}
	default:
		return h, &FormatError{file, 0, fmt.Sprintf("bad magic %#x, not a jitdump file", m)}
	}
	h.Version = le.Uint32(data[4:])
	h.Size = le.Uint32(data[8:])
	h.ElfMach = le.Uint32(data[12:])
	h.Pid = le.Uint32(data[20:])
	h.Timestamp = le.Uint64(data[24:])
	h.Flags = le.Uint64(data[32:])
	if h.Version != 1 {
		return h, &FormatError{file, 4, fmt.Sprintf("unsupported version %d", h.Version)}
	}
	if h.Size < jitdumpHeaderSize || h.Size > 4096 {
		return h, &FormatError{file, 8, fmt.Sprintf("header size %d out of range [%d, 4096]", h.Size, jitdumpHeaderSize)}
	}
	return h, nil
}

// JitdumpRecord is one decoded record. Byte slices alias the input.
type JitdumpRecord struct {
	ID        uint32
	Timestamp uint64
	Offset    int64 // file offset of the record

	// CODE_LOAD and CODE_MOVE
	Pid, Tid  uint32
	VMA       uint64
	CodeAddr  uint64 // CODE_LOAD: the code; CODE_MOVE: the new address; DEBUG_INFO: the code described
	OldAddr   uint64 // CODE_MOVE
	CodeSize  uint64
	CodeIndex uint64
	Name      []byte
	Code      []byte // CODE_LOAD

	// DEBUG_INFO
	Lines []DebugEntry

	// UNWINDING_INFO
	EHFrameHdrSize, MappedSize uint64
	Unwinding                  []byte
}

// DebugEntry is one line table entry of a DEBUG_INFO record.
type DebugEntry struct {
	Addr    uint64
	Line    uint32
	Discrim uint32 // V8 writes the column here
	File    []byte
}

// ParseJitdump decodes the complete records in data, a piece of a jitdump
// file starting at file offset base just after the header or a previous
// record, calling fn for each. It returns how many bytes it consumed: a
// partial last record (the runtime may be writing it) is left for the
// next call. A record that is malformed inside its stated size is skipped
// and the first such error returned after the others were decoded; a
// record whose size is impossible (below the record header, or above
// MaxRecord) ends the parse with an error, because nothing after it can be
// framed: the returned count then includes all of data.
func ParseJitdump(file string, base int64, data []byte, fn func(r *JitdumpRecord)) (int, error) {
	var first error
	var r JitdumpRecord
	le := binary.LittleEndian
	off := 0
	for len(data)-off >= recHeaderSize {
		id := le.Uint32(data[off:])
		size := le.Uint32(data[off+4:])
		if size < recHeaderSize || size > MaxRecord {
			err := &FormatError{file, base + int64(off), fmt.Sprintf("record size %d out of range [%d, %d]", size, recHeaderSize, MaxRecord)}
			if first == nil {
				first = err
			}
			return len(data), first
		}
		if len(data)-off < int(size) {
			break
		}
		body := data[off+recHeaderSize : off+int(size)]
		r = JitdumpRecord{ID: id, Timestamp: le.Uint64(data[off+8:]), Offset: base + int64(off), Lines: r.Lines[:0]}
		if msg := decodeRecord(body, &r); msg != "" {
			if first == nil {
				first = &FormatError{file, base + int64(off), fmt.Sprintf("record type %d: %s", id, msg)}
			}
		} else {
			fn(&r)
		}
		off += int(size)
	}
	return off, first
}

func decodeRecord(b []byte, r *JitdumpRecord) string {
	le := binary.LittleEndian
	switch r.ID {
	case RecCodeLoad:
		if len(b) < 40 {
			return "code load shorter than 40 bytes"
		}
		r.Pid, r.Tid = le.Uint32(b), le.Uint32(b[4:])
		r.VMA, r.CodeAddr, r.CodeSize, r.CodeIndex = le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[32:])
		var rest []byte
		var ok bool
		if r.Name, rest, ok = cstring(b[40:]); !ok {
			return "name not NUL-terminated"
		}
		if r.CodeSize > uint64(len(rest)) {
			// Some writers leave the code out; keep the name and range.
			r.Code = nil
		} else {
			r.Code = rest[:r.CodeSize]
		}
		if r.CodeAddr+r.CodeSize < r.CodeAddr {
			return "code range wraps around the address space"
		}
	case RecCodeMove:
		if len(b) < 48 {
			return "code move shorter than 48 bytes"
		}
		r.Pid, r.Tid = le.Uint32(b), le.Uint32(b[4:])
		r.VMA, r.OldAddr, r.CodeAddr, r.CodeSize, r.CodeIndex = le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:]), le.Uint64(b[32:]), le.Uint64(b[40:])
		if r.CodeAddr+r.CodeSize < r.CodeAddr || r.OldAddr+r.CodeSize < r.OldAddr {
			return "code range wraps around the address space"
		}
	case RecDebugInfo:
		if len(b) < 16 {
			return "debug info shorter than 16 bytes"
		}
		r.CodeAddr = le.Uint64(b)
		n := le.Uint64(b[8:])
		b = b[16:]
		if n > MaxDebugEntries || n > uint64(len(b))/17 { // an entry is at least 17 bytes
			return fmt.Sprintf("%d debug entries do not fit in %d bytes", n, len(b))
		}
		for i := uint64(0); i < n; i++ {
			if len(b) < 16 {
				return fmt.Sprintf("debug entry %d truncated", i)
			}
			e := DebugEntry{Addr: le.Uint64(b), Line: le.Uint32(b[8:]), Discrim: le.Uint32(b[12:])}
			var ok bool
			if e.File, b, ok = cstring(b[16:]); !ok {
				return fmt.Sprintf("debug entry %d: file name not NUL-terminated", i)
			}
			r.Lines = append(r.Lines, e)
		}
	case RecUnwindingInfo:
		if len(b) < 24 {
			return "unwinding info shorter than 24 bytes"
		}
		usize, hsize := le.Uint64(b), le.Uint64(b[8:])
		r.EHFrameHdrSize, r.MappedSize = hsize, le.Uint64(b[16:])
		b = b[24:]
		if usize > uint64(len(b)) || hsize > usize {
			return fmt.Sprintf("unwinding data of %d bytes (header %d) does not fit in %d", usize, hsize, len(b))
		}
		r.Unwinding = b[:usize]
	}
	return ""
}

// cstring splits a NUL-terminated string of at most MaxName bytes off b.
func cstring(b []byte) (s, rest []byte, ok bool) {
	lim := b
	if len(lim) > MaxName+1 {
		lim = lim[:MaxName+1]
	}
	i := bytes.IndexByte(lim, 0)
	if i < 0 {
		return nil, b, false
	}
	return b[:i], b[i+1:], true
}
