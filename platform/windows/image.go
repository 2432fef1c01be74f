package windows

import (
	"encoding/binary"
	"fmt"
)

// ImageInfo is what the back end reads from a loaded image's headers.
type ImageInfo struct {
	Machine       uint16
	TimeDateStamp uint32
	SizeOfImage   uint32
	// Exception directory (.pdata), as an RVA range.
	ExceptionRVA, ExceptionSize uint32
	// CodeView RSDS identity; HasCodeView says whether it was found.
	HasCodeView bool
	PDBGUID     [16]byte
	PDBAge      uint32
	PDBPath     string
}

// ImageError reports malformed image headers at an RVA.
type ImageError struct {
	RVA uint32
	Msg string
}

func (e *ImageError) Error() string { return fmt.Sprintf("pe image: rva %#x: %s", e.RVA, e.Msg) }

// Caps on what ReadImageInfo reads.
const (
	maxHeaderOffset = 64 << 10 // e_lfanew
	maxDebugEntries = 64
	maxCodeView     = 24 + 4096
	maxPdata        = 64 << 20
)

// ReadImageInfo reads an image's headers as the loader mapped them, by RVA
// (the image's memory, in this or another process, or a file through a
// section map). read must fill p entirely or fail.
func ReadImageInfo(read func(rva uint32, p []byte) error) (ImageInfo, error) {
	var ii ImageInfo
	le := binary.LittleEndian
	var dos [64]byte
	if err := read(0, dos[:]); err != nil {
		return ii, &ImageError{0, "reading the DOS header: " + err.Error()}
	}
	if dos[0] != 'M' || dos[1] != 'Z' {
		return ii, &ImageError{0, "no MZ signature"}
	}
	nt := le.Uint32(dos[0x3c:])
	if nt > maxHeaderOffset {
		return ii, &ImageError{0x3c, fmt.Sprintf("NT headers offset %#x past the cap", nt)}
	}
	var fh [24]byte
	if err := read(nt, fh[:]); err != nil {
		return ii, &ImageError{nt, "reading the file header: " + err.Error()}
	}
	if string(fh[:4]) != "PE\x00\x00" {
		return ii, &ImageError{nt, "no PE signature"}
	}
	ii.Machine = le.Uint16(fh[4:])
	ii.TimeDateStamp = le.Uint32(fh[8:])
	optSize := uint32(le.Uint16(fh[20:]))
	var opt [240]byte
	if optSize < 96 || optSize > uint32(len(opt)) {
		if optSize < 96 {
			return ii, &ImageError{nt + 20, fmt.Sprintf("optional header of %d bytes", optSize)}
		}
		optSize = uint32(len(opt))
	}
	o := opt[:optSize]
	if err := read(nt+24, o); err != nil {
		return ii, &ImageError{nt + 24, "reading the optional header: " + err.Error()}
	}
	var nDirs, dirOff uint32
	switch le.Uint16(o) {
	case 0x20b: // PE32+
		nDirs, dirOff = 108, 112
	case 0x10b: // PE32
		nDirs, dirOff = 92, 96
	default:
		return ii, &ImageError{nt + 24, fmt.Sprintf("optional header magic %#x", le.Uint16(o))}
	}
	if uint32(len(o)) < dirOff {
		return ii, &ImageError{nt + 20, fmt.Sprintf("optional header of %d bytes has no data directories", len(o))}
	}
	ii.SizeOfImage = le.Uint32(o[56:])
	n := le.Uint32(o[nDirs:])
	dir := func(i uint32) (rva, size uint32) {
		if i >= n || dirOff+8*i+8 > uint32(len(o)) {
			return 0, 0
		}
		return le.Uint32(o[dirOff+8*i:]), le.Uint32(o[dirOff+8*i+4:])
	}
	ii.ExceptionRVA, ii.ExceptionSize = dir(3)
	if ii.ExceptionSize > maxPdata || ii.ExceptionRVA >= ii.SizeOfImage {
		ii.ExceptionRVA, ii.ExceptionSize = 0, 0
	}
	dbgRVA, dbgSize := dir(6)
	if dbgRVA == 0 || dbgSize == 0 {
		return ii, nil
	}
	var e [28]byte
	for i := uint32(0); i < dbgSize/28 && i < maxDebugEntries; i++ {
		if err := read(dbgRVA+28*i, e[:]); err != nil {
			return ii, &ImageError{dbgRVA + 28*i, "reading a debug directory entry: " + err.Error()}
		}
		if le.Uint32(e[12:]) != 2 { // IMAGE_DEBUG_TYPE_CODEVIEW
			continue
		}
		size, rva := le.Uint32(e[16:]), le.Uint32(e[20:])
		if size < 24 || size > maxCodeView || rva == 0 {
			continue // not mapped, or not RSDS
		}
		cv := make([]byte, size)
		if err := read(rva, cv); err != nil {
			return ii, &ImageError{rva, "reading the CodeView record: " + err.Error()}
		}
		if string(cv[:4]) != "RSDS" {
			continue
		}
		ii.HasCodeView = true
		copy(ii.PDBGUID[:], cv[4:20])
		ii.PDBAge = le.Uint32(cv[20:])
		name := cv[24:]
		for j, c := range name {
			if c == 0 {
				name = name[:j]
				break
			}
		}
		ii.PDBPath = string(name)
		break
	}
	return ii, nil
}
