package elfsrc

import (
	"debug/elf"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/gopclntab"
)

// maxPclntab caps the size of a .gopclntab read into memory.
const maxPclntab = 1 << 30

// initGo loads the Go runtime tables of f, used when f has no DWARF
// (stripped Go binaries).
func (s *Source) initGo(f *elf.File) {
	sec := f.Section(".gopclntab")
	if sec == nil || sec.Type == elf.SHT_NOBITS || sec.Size > maxPclntab {
		return
	}
	data, err := sec.Data()
	if err != nil {
		return
	}
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
	var text uint64
	if ts := f.Section(".text"); ts != nil {
		text = ts.Addr
	}
	t, err := gopclntab.Parse(data, f.ByteOrder, text, 0, nil)
	if err != nil {
		return
	}
	// The runtime's moduledata is in .go.module (Go 1.26+), .noptrdata
	// or .data: scan writable sections, the small ones first.
	for _, d := range f.Sections {
		if d.Flags&elf.SHF_WRITE == 0 || d.Flags&elf.SHF_ALLOC == 0 || d.Type == elf.SHT_NOBITS || d.Size > maxPclntab {
			continue
		}
		b, err := d.Data()
		if err != nil {
			continue
		}
		if g, ok := t.FindGoFunc(sec.Addr, b); ok {
			t, _ = gopclntab.Parse(data, f.ByteOrder, text, g, read)
			break
		}
	}
	s.gopcln = t
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
