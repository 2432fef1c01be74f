package elfsrc

import (
	"cmp"
	"debug/elf"
	"slices"
	"sort"
)

// symbol is one entry of the address-sorted symbol table.
type symbol struct {
	addr, size uint64
	name       string
	file       string // STT_FILE name preceding a local symbol, as LLVM reports it
}

// symtab is an ELF symbol table reduced the way llvm-symbolizer reduces
// it: function, object, ifunc and untyped symbols defined in a section;
// one symbol per address (the largest, the last of equals).
type symtab []symbol

func loadSymtab(f *elf.File) symtab {
	syms, err := f.Symbols()
	if err != nil || len(syms) == 0 {
		syms, _ = f.DynamicSymbols()
	}
	out := make(symtab, 0, len(syms))
	file := ""
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FILE {
			// llvm-symbolizer names the source file of a local symbol
			// after the STT_FILE symbol before it.
			file = s.Name
			continue
		}
		switch s.Section {
		case elf.SHN_UNDEF, elf.SHN_ABS, elf.SHN_COMMON:
			continue
		}
		if int(s.Section) >= len(f.Sections) {
			continue
		}
		switch elf.ST_TYPE(s.Info) {
		case elf.STT_NOTYPE, elf.STT_FUNC, elf.STT_OBJECT, elf.STT_GNU_IFUNC:
		default:
			continue
		}
		sym := symbol{addr: s.Value, size: s.Size, name: s.Name}
		if elf.ST_BIND(s.Info) == elf.STB_LOCAL {
			sym.file = file
		}
		out = append(out, sym)
	}
	return newSymtab(out)
}

// newSymtab sorts the symbols by address and keeps one per address: the
// largest, the last of equals (llvm-symbolizer's choice).
func newSymtab(out symtab) symtab {
	slices.SortStableFunc(out, func(a, b symbol) int {
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		return cmp.Compare(a.size, b.size)
	})
	j := 0
	for i := 0; i < len(out); i++ {
		if i+1 < len(out) && out[i+1].addr == out[i].addr {
			continue
		}
		out[j] = out[i]
		j++
	}
	return out[:j]
}

// lookup returns the symbol covering addr: the last symbol at or below
// addr, unless it has a size and addr lies past it.
func (t symtab) lookup(addr uint64) (symbol, bool) {
	i := sort.Search(len(t), func(i int) bool { return t[i].addr > addr })
	if i == 0 {
		return symbol{}, false
	}
	s := t[i-1]
	if s.size != 0 && s.addr+s.size <= addr {
		return symbol{}, false
	}
	return s, true
}
