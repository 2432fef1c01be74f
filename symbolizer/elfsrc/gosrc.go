package elfsrc

import (
	"debug/elf"

	"github.com/rawstack/rawstack/internal/gopclntab"
	"github.com/rawstack/rawstack/symbolizer"
)

// maxPclntab caps the size of a .gopclntab read into memory.
const maxPclntab = 1 << 30

// initGo loads the Go runtime tables of f, used when f has no DWARF
// (stripped Go binaries).
func (s *Source) initGo(f *elf.File) {
	read := func(addr uint64, p []byte) bool {
		for _, sc := range f.Sections {
			if sc.Flags&elf.SHF_ALLOC == 0 || sc.Type == elf.SHT_NOBITS {
				continue
			}
			if addr >= sc.Addr && addr-sc.Addr < sc.Size && uint64(len(p)) <= sc.Size-(addr-sc.Addr) {
				_, err := sc.ReadAt(p, int64(addr-sc.Addr))
				return err == nil
			}
		}
		return false
	}
	if t, err := gopclntab.ParseELFInline(f, maxPclntab, read); err == nil {
		s.gopcln = t
	}
}

func (s *Source) goFrames(addr uint64, dst []symbolizer.Frame) []symbolizer.Frame {
	var buf [16]gopclntab.Frame
	frs, ok := s.gopcln.Symbolize(addr, buf[:0])
	if !ok {
		return dst
	}
	for _, f := range frs {
		dst = append(dst, symbolizer.Frame{Function: f.Function, File: f.File, Line: f.Line})
	}
	return dst
}
