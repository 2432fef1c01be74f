package pesrc

import (
	"encoding/binary"

	"github.com/rawstack/rawstack/internal/gopclntab"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

const (
	scnCode     = 0x00000020
	scnInitData = 0x00000040
	scnExecute  = 0x20000000
	scnWrite    = 0x80000000
)

// findPclntab finds Go's runtime tables in an image without DWARF. The
// Go linker writes no section of its own for them in PE (they sit in
// .rdata, between runtime.pclntab and runtime.epclntab, symbols that
// -ldflags=-s removes), so they are found by their header: the magic of
// Go 1.18+, two zero bytes, the instruction quantum and the pointer size.
// A candidate is taken when the runtime's moduledata in a writable
// section points at it (which also gives the inline trees' base); failing
// that, the first candidate that parses. nil when there is none.
func findPclntab(img *pe.File) *gopclntab.Table {
	f := img.PE
	var text uint64
	for _, s := range f.Sections {
		if s.Characteristics&scnCode != 0 || s.Characteristics&scnExecute != 0 {
			text = img.ImageBase + uint64(s.VirtualAddress)
			break
		}
	}
	if text == 0 {
		return nil
	}
	read := func(va uint64, p []byte) bool {
		if va < img.ImageBase || va-img.ImageBase > 1<<32-1 {
			return false
		}
		return img.ReadRVA(uint32(va-img.ImageBase), p) == nil
	}
	var writable [][]byte
	loadWritable := func() {
		if writable != nil {
			return
		}
		writable = [][]byte{}
		for _, s := range f.Sections {
			if s.Characteristics&scnWrite == 0 || s.Characteristics&scnInitData == 0 || s.Size == 0 {
				continue
			}
			b, err := sectionData(img, s.Name)
			if err != nil {
				continue
			}
			writable = append(writable, b)
		}
	}
	var first *gopclntab.Table
	tried := 0
	for _, s := range f.Sections {
		if s.Characteristics&scnInitData == 0 || s.Characteristics&(scnExecute|scnWrite) != 0 || s.Size == 0 {
			continue
		}
		b, err := sectionData(img, s.Name)
		if err != nil {
			continue
		}
		for off := 0; off+8 <= len(b) && tried < maxCandidate; off += 4 {
			m := binary.LittleEndian.Uint32(b[off:])
			if m != 0xfffffff1 && m != 0xfffffff0 || b[off+4] != 0 || b[off+5] != 0 {
				continue
			}
			if q := b[off+6]; q != 1 && q != 2 && q != 4 || b[off+7] != 4 && b[off+7] != 8 {
				continue
			}
			tried++
			data := b[off:]
			t, err := gopclntab.Parse(data, binary.LittleEndian, text, 0, nil)
			if err != nil {
				continue
			}
			addr := img.ImageBase + uint64(s.VirtualAddress) + uint64(off)
			loadWritable()
			for _, w := range writable {
				if g, ok := t.FindGoFunc(addr, w); ok {
					if t2, err := gopclntab.Parse(data, binary.LittleEndian, text, g, read); err == nil {
						return t2
					}
				}
			}
			if first == nil {
				first = t
			}
		}
	}
	return first
}
