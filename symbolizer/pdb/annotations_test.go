package pdb

import (
	"encoding/binary"
	"fmt"
	"testing"
)

func TestAnnotationsDecode(t *testing.T) {
	// ChangeCodeOffset 0x1234 (2-byte form), ChangeLineOffset -3,
	// ChangeCodeOffsetAndLineOffset (code 5, line +2),
	// ChangeCodeLengthAndCodeOffset (len 0x10, off 0x20), ChangeFile 0x18,
	// ChangeCodeLength 0x123456 (4-byte form), then padding.
	p := []byte{3, 0x92, 0x34, 6, 7, 11, 0x45, 12, 0x10, 0x20, 5, 0x18, 4, 0xC0, 0x12, 0x34, 0x56, 0, 0}
	got := fmt.Sprint(annotations(p, nil))
	want := fmt.Sprint([]annotation{
		{op: baChangeCodeOffset, u1: 0x1234},
		{op: baChangeLineOffset, s1: -3},
		{op: baChangeCodeOffsetAndLineOffset, u1: 5, s1: 2},
		{op: baChangeCodeLengthAndCodeOffset, u1: 0x10, u2: 0x20},
		{op: baChangeFile, u1: 0x18},
		{op: baChangeCodeLength, u1: 0x123456},
	})
	if got != want {
		t.Errorf("annotations:\n got  %s\n want %s", got, want)
	}
	// Truncated operands end decoding without panicking.
	for i := range p {
		annotations(p[:i], nil)
	}
}

// rec encodes a CodeView record.
func rec(kind uint16, body ...any) []byte {
	var b []byte
	for _, x := range body {
		switch v := x.(type) {
		case uint16:
			b = binary.LittleEndian.AppendUint16(b, v)
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, v)
		case uint8:
			b = append(b, v)
		case string:
			b = append(append(b, v...), 0)
		case []byte:
			b = append(b, v...)
		}
	}
	for (len(b)+4)%4 != 0 {
		b = append(b, 0)
	}
	return append(binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(nil, uint16(len(b)+2)), kind), b...)
}

// TestInlineSite2 runs a hand-made module with S_INLINESITE2 (which
// clang does not emit) through the inline frame walk.
func TestInlineSite2(t *testing.T) {
	// IPI: 0x1000 = LF_FUNC_ID "inner", no scope.
	ipiRec := rec(lfFuncID, uint32(0), uint32(0), "inner")
	// Module symbols: signature, S_GPROC32 at 4, S_INLINESITE2, end, S_END.
	syms := binary.LittleEndian.AppendUint32(nil, 4)
	procOff := uint32(len(syms))
	procRec := rec(sGProc32, uint32(0), uint32(0), uint32(0), uint32(0x40), uint32(0), uint32(0), uint32(0), uint32(0x10), uint16(1), uint8(0), "outer")
	siteOff := procOff + uint32(len(procRec))
	// Annotations: line +2 at code 0x8, length 0x10.
	site := rec(sInlineSite2, procOff, uint32(0), uint32(0x1000), uint32(1), []byte{baChangeLineOffset, 4, baChangeCodeOffset, 8, baChangeCodeLength, 0x10})
	siteEnd := siteOff + uint32(len(site))
	binary.LittleEndian.PutUint32(site[8:], siteEnd)
	end := rec(sInlineSiteEnd)
	procEnd := siteEnd + uint32(len(end))
	binary.LittleEndian.PutUint32(procRec[8:], procEnd)
	syms = append(append(append(append(syms, procRec...), site...), end...), rec(sEnd)...)

	f := &File{name: "synthetic.pdb", namesOK: true, names: []byte("\x00a.h\x00")}
	f.ipi = &typeStream{cache: map[uint32][]byte{0x1000: ipiRec[2:]}}
	f.tpi = &typeStream{cache: map[uint32][]byte{}}
	m := &modInfo{syms: syms, symEnd: uint32(len(syms)),
		chksums:  map[uint32]uint32{0: 1},
		inlinees: map[uint32]inlineeLine{0x1000: {file: 0, line: 10}}}
	p := &proc{rva: 0x1010, size: 0x40, name: "outer", recOff: procOff, end: procEnd}
	for _, tc := range []struct {
		off  uint32
		want string
	}{
		{0x4, "[]"},
		{0x8, "[{inner a.h 12 0}]"},
		{0x17, "[{inner a.h 12 0}]"},
		{0x18, "[]"},
	} {
		got := fmt.Sprint(f.inlineFrames(m, p, p.rva+tc.off, nil))
		if got != tc.want {
			t.Errorf("offset %#x: %s, want %s", tc.off, got, tc.want)
		}
	}
}
