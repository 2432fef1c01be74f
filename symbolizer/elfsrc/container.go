package elfsrc

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
)

// Container is debug information held in a file that is not ELF: the
// DWARF sections and symbol table of a PE image (mingw gcc, clang
// -gdwarf, Go for Windows), handed over by that format's reader so that
// one DWARF reader serves every container.
type Container struct {
	// Name is the file's name, for errors.
	Name string
	// Order is the byte order of the DWARF data.
	Order binary.ByteOrder
	// Section returns the bytes of a section by its ELF-style name
	// (".debug_info"), or nil and no error when the file has none. A
	// GNU-compressed twin (".zdebug_info", as the Go linker writes for
	// PE) is asked for when the plain section is missing.
	Section func(name string) ([]byte, error)
	// Symbols is the file's symbol table in addresses of the DWARF
	// (virtual addresses), sizes already known; a zero size reaches to
	// the next symbol. They name the outermost frame, as llvm-symbolizer
	// names it from the symbol table over DWARF.
	Symbols []Symbol
	// Closer, if set, is closed by Source.Close.
	Closer io.Closer
	// NoDemangle keeps names as the file spells them.
	NoDemangle bool
	// Dir0 joins file names of DWARF 5 line tables as llvm-symbolizer 19
	// does (see dwarfline.Table.FileNameDir0); ELF sources follow the
	// llvm-symbolizer 14 that Debian ships as llvm-symbolizer.
	Dir0 bool
	// Demangle, if set, turns every function name (from the DWARF and
	// the symbols) into the name to print, in place of the Itanium and
	// Rust demangler ELF names get: a PE image also has Microsoft names
	// and, on x86, decorated C names.
	Demangle func(name string) string
}

// Symbol is one entry of a Container's symbol table.
type Symbol struct {
	Addr, Size uint64
	Name       string
}

// NewDWARF returns a Source over the DWARF sections and symbols of a
// non-ELF container. Addresses are the container's virtual addresses (for
// PE: ImageBase + RVA, as its DWARF records them). A container without
// .debug_info gives a Source that names addresses from Symbols alone.
func NewDWARF(c Container) (*Source, error) {
	s := &Source{path: c.Name, closer: c.Closer, noDemangle: c.NoDemangle, dir0: c.Dir0, demangleFn: c.Demangle}
	syms := make(symtab, 0, len(c.Symbols))
	for _, sym := range c.Symbols {
		syms = append(syms, symbol{addr: sym.Addr, size: sym.Size, name: sym.Name})
	}
	s.syms = newSymtab(syms)
	get := func(name string) ([]byte, error) {
		b, err := c.Section(name)
		if b != nil || err != nil || !strings.HasPrefix(name, ".debug_") {
			return b, err
		}
		z := ".zdebug_" + name[len(".debug_"):]
		raw, err := c.Section(z)
		if raw == nil || err != nil {
			return nil, err
		}
		return gnuDecompress(z, raw)
	}
	info, err := get(".debug_info")
	if err != nil {
		return nil, fmt.Errorf("elfsrc: %s: section .debug_info: %w", c.Name, err)
	}
	if info == nil {
		return s, nil
	}
	var data [len(dwarfNames)][]byte
	var lazy [len(dwarfNames)]bool
	data[secInfo], lazy[secInfo] = info, true
	if err := s.loadDWARF(&data, &lazy, c.Order, get); err != nil {
		return nil, fmt.Errorf("elfsrc: %s: %w", c.Name, err)
	}
	return s, nil
}

// InDWARF reports whether a compile unit of the DWARF covers addr: then
// Symbolize answers from the DWARF (as llvm-symbolizer's DWARF context
// would), else from the symbol table alone.
func (s *Source) InDWARF(addr uint64) bool {
	return s.hasDWARF && s.unitFor(addr) != nil
}
