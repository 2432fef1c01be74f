// Package jitfile parses the files JIT runtimes write for profilers: perf
// maps (/tmp/perf-PID.map, one "START SIZE name" line per piece of code)
// and jitdump files (jit-PID.dump, binary records of code loads, moves,
// debug and unwinding information, as specified by the Linux perf tools'
// jitdump-specification.txt). Both are read incrementally, while the
// runtime still appends to them, and both are untrusted input: every size
// read from them is capped and a malformed line or record is an error that
// names its offset and loses nothing else.
//
// The package is plain byte parsing and compiles on every OS; the Linux
// back end (platform/linux) finds and tails the files.
package jitfile

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every parse error.
var ErrMalformed = errors.New("malformed")

// FormatError reports malformed input at a byte offset of the named file.
type FormatError struct {
	File   string
	Offset int64
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("jitfile: %s: offset %d: %s", e.File, e.Offset, e.Msg)
}

func (e *FormatError) Unwrap() error { return ErrMalformed }

// MaxPerfMapLine caps the length of one perf map line; a longer line is
// malformed (and skipped up to its newline).
const MaxPerfMapLine = 64 << 10

// PerfMapEntry is one line of a perf map.
type PerfMapEntry struct {
	Addr, Size uint64
	Name       []byte // aliases the input
}

// ParsePerfMap calls fn for every complete line of data, a piece of a perf
// map starting at file offset base. It returns how many bytes it consumed:
// up to and including the last newline, so that the caller keeps the
// partial last line (the runtime may be writing it) for the next call. A
// malformed line is skipped; the first such line's error is returned
// (a *FormatError naming file and offset) after every line was parsed.
//
// A line is "START SIZE NAME": START and SIZE in hex, with or without a
// 0x prefix (Java writes it, V8 does not), NAME the rest of the line,
// which may hold spaces.
func ParsePerfMap(file string, base int64, data []byte, fn func(e *PerfMapEntry)) (int, error) {
	var first error
	var e PerfMapEntry
	off := 0
	for {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			if len(data)-off > MaxPerfMapLine {
				// No newline in sight: give up on this line rather than
				// buffering it without bound.
				if first == nil {
					first = &FormatError{file, base + int64(off), fmt.Sprintf("line longer than %d bytes", MaxPerfMapLine)}
				}
				return len(data), first
			}
			return off, first
		}
		line := data[off : off+nl]
		if len(line) > MaxPerfMapLine {
			if first == nil {
				first = &FormatError{file, base + int64(off), fmt.Sprintf("line longer than %d bytes", MaxPerfMapLine)}
			}
		} else if len(line) > 0 {
			if err := parsePerfMapLine(line, &e); err != "" {
				if first == nil {
					first = &FormatError{file, base + int64(off), err}
				}
			} else {
				fn(&e)
			}
		}
		off += nl + 1
	}
}

func parsePerfMapLine(line []byte, e *PerfMapEntry) string {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	var ok bool
	if e.Addr, line, ok = hexField(line); !ok {
		return "bad start address"
	}
	if e.Size, line, ok = hexField(line); !ok {
		return "bad size"
	}
	if e.Addr+e.Size < e.Addr {
		return "range wraps around the address space"
	}
	e.Name = line
	return ""
}

// hexField parses a hex number and the spaces after it.
func hexField(b []byte) (uint64, []byte, bool) {
	if len(b) >= 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		b = b[2:]
	}
	var v uint64
	n := 0
	for ; n < len(b); n++ {
		c := b[n]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			goto end
		}
		if v>>60 != 0 {
			return 0, b, false // more than 64 bits
		}
		v = v<<4 | uint64(d)
	}
end:
	if n == 0 || n < len(b) && b[n] != ' ' && b[n] != '\t' {
		return 0, b, false
	}
	b = b[n:]
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return v, b, true
}
