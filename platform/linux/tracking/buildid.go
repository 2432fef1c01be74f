package tracking

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/rawstack/rawstack/internal/elfnote"
)

// Caps on what readBuildIDs takes from a file.
const (
	maxPhnum     = 512
	maxNoteBytes = 1 << 16
	maxDescBytes = 1 << 10
)

// ErrNotELF says a file does not start with the ELF magic.
var ErrNotELF = errors.New("not an ELF file")

// FormatError says where in a file decoding failed.
type FormatError struct {
	Off int64
	Msg string
}

func (e *FormatError) Error() string { return fmt.Sprintf("elf: offset %#x: %s", e.Off, e.Msg) }

// elfIDs are the identities read from an ELF file's notes.
type elfIDs struct {
	BuildID   []byte // NT_GNU_BUILD_ID
	GoBuildID string // Go toolchain build id note
}

// readBuildIDs reads the GNU and Go build ids from the PT_NOTE segments of
// the ELF file r (of either class and byte order).
func readBuildIDs(r io.ReaderAt) (elfIDs, error) {
	var ids elfIDs
	var ident [64]byte
	n, err := r.ReadAt(ident[:], 0)
	if n < 52 {
		if err == nil || err == io.EOF {
			err = ErrNotELF
		}
		return ids, err
	}
	if string(ident[:4]) != "\x7fELF" {
		return ids, ErrNotELF
	}
	class, data := ident[4], ident[5]
	var bo binary.ByteOrder
	switch data {
	case 1:
		bo = binary.LittleEndian
	case 2:
		bo = binary.BigEndian
	default:
		return ids, &FormatError{5, fmt.Sprintf("bad data encoding %d", data)}
	}
	var phoff uint64
	var phentsize, phnum uint16
	switch class {
	case 1:
		phoff = uint64(bo.Uint32(ident[28:]))
		phentsize, phnum = bo.Uint16(ident[42:]), bo.Uint16(ident[44:])
	case 2:
		if n < 64 {
			return ids, &FormatError{0, "short ELF64 header"}
		}
		phoff = bo.Uint64(ident[32:])
		phentsize, phnum = bo.Uint16(ident[54:]), bo.Uint16(ident[56:])
	default:
		return ids, &FormatError{4, fmt.Sprintf("bad class %d", class)}
	}
	want := uint16(32)
	if class == 2 {
		want = 56
	}
	if phnum == 0 {
		return ids, nil
	}
	if phentsize < want || phnum > maxPhnum {
		return ids, &FormatError{int64(phoff), fmt.Sprintf("%d program headers of %d bytes", phnum, phentsize)}
	}
	ph := make([]byte, int(phentsize)*int(phnum))
	if _, err := r.ReadAt(ph, int64(phoff)); err != nil {
		return ids, &FormatError{int64(phoff), "reading program headers: " + err.Error()}
	}
	var notes []byte
	for i := 0; i < int(phnum); i++ {
		p := ph[i*int(phentsize):]
		if bo.Uint32(p) != 4 { // PT_NOTE
			continue
		}
		var off, size, align uint64
		if class == 1 {
			off, size, align = uint64(bo.Uint32(p[4:])), uint64(bo.Uint32(p[16:])), uint64(bo.Uint32(p[28:]))
		} else {
			off, size, align = bo.Uint64(p[8:]), bo.Uint64(p[32:]), bo.Uint64(p[48:])
		}
		if size > maxNoteBytes || off > 1<<62 {
			continue
		}
		if cap(notes) < int(size) {
			notes = make([]byte, size)
		}
		notes = notes[:size]
		if _, err := r.ReadAt(notes, int64(off)); err != nil {
			continue
		}
		parseNotes(notes, bo, align, &ids)
	}
	return ids, nil
}

// parseNotes scans a note segment for the build ids.
func parseNotes(b []byte, bo binary.ByteOrder, align uint64, ids *elfIDs) {
	elfnote.ForEach(b, bo, align, func(name string, typ uint32, desc []byte, _ int) bool {
		if len(name) > maxDescBytes || len(desc) > maxDescBytes {
			return false // no build id is this large: the block is bad
		}
		switch {
		case typ == elfnote.TypeGNUBuildID && name == "GNU" && ids.BuildID == nil:
			ids.BuildID = append([]byte(nil), desc...)
		case typ == elfnote.TypeGoBuildID && name == "Go" && ids.GoBuildID == "":
			ids.GoBuildID = string(bytes.TrimRight(desc, "\x00"))
		}
		return true
	})
}
