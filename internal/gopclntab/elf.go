package gopclntab

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// ELFText returns runtime.text of the Go ELF binary f whose .gopclntab
// holds tab (decoded with text 0), the base of every function entry in
// the table. In order: the table header's copy when it lies in
// executable code (internally linked binaries), else the text field of
// the runtime's moduledata that points at the table (externally linked
// binaries, where the header's copy is 0 and the C start-up code comes
// before Go's text, so .text's address is not it), else the runtime.text
// symbol, else the .text section's address.
func ELFText(f *elf.File, tab *Table, tabAddr uint64) uint64 {
	inCode := func(a uint64) bool {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && a >= p.Vaddr && a-p.Vaddr < p.Memsz {
				return true
			}
		}
		return false
	}
	if tab.textStart != 0 && inCode(tab.textStart) {
		return tab.textStart
	}
	ps := tab.ptrSize
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_WRITE == 0 || s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS || s.Size > 64<<20 {
			continue
		}
		b, err := s.Data()
		if err != nil {
			continue
		}
		for off := 0; off+ps <= len(b); off += ps {
			if word(tab.bo, ps, b, off) != tabAddr {
				continue
			}
			for _, l := range layouts {
				if t := word(tab.bo, ps, b, off+l.text*ps); t != 0 && inCode(t) {
					return t
				}
			}
		}
	}
	if syms, err := f.Symbols(); err == nil {
		for _, s := range syms {
			if s.Name == "runtime.text" {
				return s.Value
			}
		}
	}
	if s := f.Section(".text"); s != nil {
		return s.Addr
	}
	return 0
}

// word reads a pointer-sized word of data at off, 0 past its end.
func word(bo binary.ByteOrder, ps int, data []byte, off int) uint64 {
	if off < 0 || off+ps > len(data) {
		return 0
	}
	if ps == 8 {
		return bo.Uint64(data[off:])
	}
	return uint64(bo.Uint32(data[off:]))
}

// ParseELF reads f's .gopclntab (at most max bytes) and decodes it with
// the text start of [ELFText]. It also returns the section's address.
// Inlined frames are not decoded (see [Parse]).
func ParseELF(f *elf.File, max uint64) (*Table, uint64, error) {
	return ParseELFIn(f, nil, max)
}

// ParseELFIn is [ParseELF] over file, f's bytes mapped in memory, where
// it holds the section: the table is then a slice of the mapping, and
// only the pages a lookup touches are read (a large Go binary's table is
// tens of MiB, which a copy would put on the heap). With a nil file, or
// one that does not hold the section, it reads the section.
func ParseELFIn(f *elf.File, file []byte, max uint64) (*Table, uint64, error) {
	sec := f.Section(".gopclntab")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, 0, fmt.Errorf("gopclntab: no .gopclntab section")
	}
	if sec.Size > max {
		return nil, 0, fmt.Errorf("gopclntab: .gopclntab is %d bytes, over the %d cap", sec.Size, max)
	}
	var data []byte
	if sec.Flags&elf.SHF_COMPRESSED == 0 && sec.Offset <= uint64(len(file)) && sec.Size <= uint64(len(file))-sec.Offset {
		data = file[sec.Offset : sec.Offset+sec.Size : sec.Offset+sec.Size]
	} else {
		var err error
		if data, err = sec.Data(); err != nil {
			return nil, 0, fmt.Errorf("gopclntab: reading .gopclntab: %w", err)
		}
	}
	t, err := Parse(data, f.ByteOrder, 0, 0, nil)
	if err != nil {
		return nil, 0, err
	}
	if text := ELFText(f, t, sec.Addr); text != 0 {
		t.textStart = text
	}
	return t, sec.Addr, nil
}

// ParseELFInline is [ParseELF] with inlined frames: it finds go:func.*
// through the runtime's moduledata in f's writable sections (.go.module
// in Go 1.26+, .noptrdata or .data before) and decodes the inline trees
// there through read, which reads f's memory image at a virtual address.
// Without moduledata the table folds inlined frames into their callers.
func ParseELFInline(f *elf.File, max uint64, read func(addr uint64, p []byte) bool) (*Table, error) {
	t, addr, err := ParseELF(f, max)
	if err != nil {
		return nil, err
	}
	for _, d := range f.Sections {
		if d.Flags&elf.SHF_WRITE == 0 || d.Flags&elf.SHF_ALLOC == 0 || d.Type == elf.SHT_NOBITS || d.Size > max {
			continue
		}
		b, err := d.Data()
		if err != nil {
			continue
		}
		if g, ok := t.FindGoFunc(addr, b); ok {
			t.gofunc, t.read = g, read
			break
		}
	}
	return t, nil
}
