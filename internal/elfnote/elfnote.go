// Package elfnote walks ELF note blocks (PT_NOTE segments, SHT_NOTE
// sections, core-file notes, /sys/kernel/notes) and finds build ids in
// them. The record layout is the ELF gABI's: namesz, descsz and type as
// 32-bit words in the file's byte order, then the name and the
// descriptor, each padded to the block's alignment (4, or 8 for some
// 64-bit notes). Every size is checked against the block before use.
package elfnote

import (
	"bytes"
	"encoding/binary"
)

// Note types this package names.
const (
	TypeGNUBuildID = 3 // NT_GNU_BUILD_ID, owner "GNU"
	TypeGoBuildID  = 4 // the Go toolchain's build id, owner "Go"
)

// MaxField caps a note's name and descriptor sizes.
const MaxField = 64 << 20

// ForEach calls fn for each note in b with its owner name (trailing NULs
// removed), type, descriptor and offset in b, until fn returns false. align
// is the block's alignment: 8 means 8, anything else 4. ForEach returns the
// offset of a truncated or oversized note, or -1 when the block was walked
// to its end (or fn stopped it).
func ForEach(b []byte, bo binary.ByteOrder, align uint64, fn func(name string, typ uint32, desc []byte, off int) bool) int {
	al := uint64(4)
	if align == 8 {
		al = 8
	}
	pad := func(n uint64) uint64 { return (n + al - 1) &^ (al - 1) }
	off := 0
	for off < len(b) {
		if len(b)-off < 12 {
			return off
		}
		namesz, descsz, typ := uint64(bo.Uint32(b[off:])), uint64(bo.Uint32(b[off+4:])), bo.Uint32(b[off+8:])
		rest := uint64(len(b) - off - 12)
		if namesz > MaxField || descsz > MaxField || pad(namesz) > rest || descsz > rest-pad(namesz) {
			return off
		}
		name := bytes.TrimRight(b[off+12:off+12+int(namesz)], "\x00")
		d := off + 12 + int(pad(namesz))
		if !fn(string(name), typ, b[d:d+int(descsz)], off) {
			return -1
		}
		// The last note's descriptor padding may be cut off by the block.
		off = int(min(uint64(d)+pad(descsz), uint64(len(b))))
	}
	return -1
}

// GNUBuildID returns a copy of the descriptor of the first NT_GNU_BUILD_ID
// note in b, or nil.
func GNUBuildID(b []byte, bo binary.ByteOrder, align uint64) []byte {
	var id []byte
	ForEach(b, bo, align, func(name string, typ uint32, desc []byte, _ int) bool {
		if typ == TypeGNUBuildID && name == "GNU" {
			id = append([]byte{}, desc...)
			return false
		}
		return true
	})
	return id
}
