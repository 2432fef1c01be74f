package pesrc

import (
	"cmp"
	debugpe "debug/pe"
	"slices"

	"github.com/rawstack/rawstack/symbolizer/elfsrc"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

// COFF symbol table constants (PE/COFF specification, "COFF Symbol Table").
const (
	symUndefined = 0
	symAbsolute  = -1
	symDebug     = -2

	classExternal     = 2
	classStatic       = 3
	classFile         = 103
	classWeakExternal = 105

	dtypeFunction = 2 // complex type, in bits 4–5 of Type
)

// symbols returns the image's symbol table as llvm-symbolizer builds it
// for a COFF file: function and data symbols defined in a section, at
// ImageBase + section address + value, each reaching to the next symbol
// of its section (any kind of symbol ends the one before it; the last of
// a section has no end). An image without such symbols (a linker that
// wrote none, or one stripped) is named from its exports instead; an
// error says the export table is damaged (no symbols are returned then).
func symbols(img *pe.File) ([]elfsrc.Symbol, error) {
	f := img.PE
	nsec := len(f.Sections)
	type ent struct {
		group int    // section number, 1-based; nsec+1 for reserved numbers
		value uint64 // as computeSymbolSizes sorts: the raw value, the end of a section for its end marker
		idx   int    // index into out, -1 for symbols not kept and section ends
	}
	var ents []ent
	var out []elfsrc.Symbol
	cs := f.COFFSymbols
	for i := 0; i < len(cs); i++ {
		sym := &cs[i]
		naux := int(sym.NumberOfAuxSymbols)
		sec := int(sym.SectionNumber)
		group := sec
		if sec < 1 || sec > nsec {
			group = nsec + 1
		}
		e := ent{group: group, value: uint64(sym.Value), idx: -1}
		if group <= nsec && keepSymbol(sym) {
			name, err := sym.FullName(f.StringTable)
			if err == nil {
				s := f.Sections[sec-1]
				e.idx = len(out)
				out = append(out, elfsrc.Symbol{Addr: img.ImageBase + uint64(s.VirtualAddress) + uint64(sym.Value), Name: name})
			}
		}
		ents = append(ents, e)
		i += naux
	}
	if len(out) == 0 {
		return exportSymbols(img)
	}
	for i, s := range f.Sections {
		size := min(s.VirtualSize, s.Size)
		ents = append(ents, ent{group: i + 1, value: img.ImageBase + uint64(s.VirtualAddress) + uint64(size), idx: -1})
	}
	slices.SortStableFunc(ents, func(a, b ent) int {
		if c := cmp.Compare(a.group, b.group); c != 0 {
			return c
		}
		return cmp.Compare(a.value, b.value)
	})
	// The size of a symbol is the gap to the next distinct value of the
	// list (LLVM's computeSymbolSizes; values of symbols and the section
	// end markers mix, so the last symbol of a section never ends).
	for i, next := 0, 0; i < len(ents)-1; i++ {
		if ents[i].idx < 0 {
			continue
		}
		if next <= i {
			next = i + 1
			for next < len(ents)-1 && ents[next].value == ents[i].value {
				next++
			}
		}
		out[ents[i].idx].Size = ents[next].value - ents[i].value
	}
	return out, nil
}

// keepSymbol says whether llvm-symbolizer takes a COFF symbol: a function
// (by its complex type), or data that is defined, not a file record and
// not a section definition.
func keepSymbol(s *debugpe.COFFSymbol) bool {
	if s.Type>>4&3 == dtypeFunction {
		return true
	}
	sec := s.SectionNumber
	switch {
	case sec == symUndefined && s.Value == 0, s.StorageClass == classWeakExternal: // undefined
		return false
	case s.StorageClass == classFile:
		return false
	case sec == symDebug:
		return false
	case s.NumberOfAuxSymbols > 0 && (s.StorageClass == classStatic || s.StorageClass == classExternal && sec == symAbsolute):
		return false // a section definition
	}
	return sec > 0
}

// exportSymbols names code from the export table, as llvm-symbolizer does
// for an image without symbols: each export, forwarders and unnamed ones
// included, reaches to the next symbol.
func exportSymbols(img *pe.File) ([]elfsrc.Symbol, error) {
	exps, err := img.Exports()
	if err != nil {
		return nil, err
	}
	out := make([]elfsrc.Symbol, 0, len(exps))
	for _, e := range exps {
		out = append(out, elfsrc.Symbol{Addr: img.ImageBase + uint64(e.RVA), Name: e.Name})
	}
	return out, nil
}
