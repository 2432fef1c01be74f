package elfsrc

import (
	"bytes"
	"debug/elf"
	"fmt"
	"slices"
	"strings"

	"github.com/rawstack/rawstack/internal/mapfile"
	"github.com/rawstack/rawstack/symbolizer"
)

// symRank orders aliases at one address the way eu-stack tends to name
// them: global or weak before local, the default version before an older
// one, fewer leading underscores ("read" before "__read").
func symRank(name string, info byte) int {
	r := 0
	if b := elf.ST_BIND(info); b == elf.STB_GLOBAL || b == elf.STB_WEAK {
		r += 100
	}
	if !strings.Contains(name, "@") || strings.Contains(name, "@@") {
		r += 10
	}
	r -= len(name) - len(strings.TrimLeft(name, "_"))
	return r
}

// rawSymtab is a symbol table walked without building a Symbol, or a name
// string, per entry: libc's debug file has tens of thousands, and a
// snapshot names a few dozen addresses.
type rawSymtab struct {
	n    int
	each func(fn func(k int, value, size uint64, info byte, shndx elf.SectionIndex))
	name func(k int) string
	// raw, where not nil, returns the name's bytes in place (no copy).
	raw func(k int) []byte
}

// sectionBytes returns sec's bytes: a slice of the mapped file where the
// section is stored uncompressed within it, else a copy read from f.
func sectionBytes(sec *elf.Section, mapped []byte) ([]byte, error) {
	if mapped != nil && sec.Type != elf.SHT_NOBITS && sec.Flags&elf.SHF_COMPRESSED == 0 &&
		sec.Offset <= uint64(len(mapped)) && sec.FileSize <= uint64(len(mapped))-sec.Offset {
		return mapped[sec.Offset : sec.Offset+sec.FileSize : sec.Offset+sec.FileSize], nil
	}
	return sec.Data()
}

// fileRawSymtab returns the .symtab of f, or its .dynsym where it has none.
// mapped, when not nil, is the whole file f was read from: the table is
// then read in place, not copied.
func fileRawSymtab(f *elf.File, mapped []byte) (*rawSymtab, error) {
	var sec *elf.Section
	for _, s := range f.Sections {
		if s.Type == elf.SHT_SYMTAB {
			sec = s
			break
		}
	}
	if sec != nil && f.Class == elf.ELFCLASS64 && int(sec.Link) > 0 && int(sec.Link) < len(f.Sections) {
		data, err := sectionBytes(sec, mapped)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sec.Name, err)
		}
		str, err := sectionBytes(f.Sections[sec.Link], mapped)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Sections[sec.Link].Name, err)
		}
		const size = 24 // Elf64_Sym
		bo := f.ByteOrder
		if n := len(data) / size; n > 1 { // entry 0 is the null symbol
			st := &rawSymtab{
				n: n,
				each: func(fn func(k int, value, size uint64, info byte, shndx elf.SectionIndex)) {
					for k := 1; k < n; k++ {
						e := data[k*size : (k+1)*size]
						fn(k, bo.Uint64(e[8:]), bo.Uint64(e[16:]), e[4], elf.SectionIndex(bo.Uint16(e[6:])))
					}
				},
				raw: func(k int) []byte {
					off := uint64(bo.Uint32(data[k*size:]))
					if off >= uint64(len(str)) {
						return nil
					}
					b := str[off:]
					if i := bytes.IndexByte(b, 0); i >= 0 {
						b = b[:i]
					}
					return b
				},
			}
			st.name = func(k int) string { return string(st.raw(k)) }
			return st, nil
		}
	}
	syms, err := f.Symbols()
	if err != nil || len(syms) == 0 {
		syms, err = f.DynamicSymbols()
	}
	if err != nil {
		return nil, err
	}
	return &rawSymtab{
		n: len(syms),
		each: func(fn func(k int, value, size uint64, info byte, shndx elf.SectionIndex)) {
			for k, s := range syms {
				fn(k, s.Value, s.Size, s.Info, s.Section)
			}
		},
		name: func(k int) string { return syms[k].Name },
	}, nil
}

// SymtabNames is the symbolizer's fast symbol-table-only mode, for
// callers that name a few addresses once (rawstack snapshot): it names the
// link-time addresses addrs from the symbol table of the ELF file at path,
// as eu-stack does, demangled, without parsing DWARF or building a sorted
// table: the function symbol starting
// nearest at or below an address names it if its range holds the address
// (or it has no size); of several at one address the largest, then the
// best ranked ([symRank]). It returns nil when the file has no function
// symbols. Two passes over the table, with no sort of it: the first finds
// the nearest start below each address, the second the best symbol at
// each of those starts.
//
// The file is mapped, not read: of libc's 4 MB debug file only the symbol
// and string tables are touched, in place.
func SymtabNames(path string, addrs []uint64) (map[uint64]string, error) {
	return mapped(path, func(m *mapfile.File) (map[uint64]string, error) { return symtabNames(m, addrs) })
}

// mapped maps the file at path and runs fn on it, a fault on the mapping
// (the file shrank) being an error that names the file.
func mapped[T any](path string, fn func(*mapfile.File) (T, error)) (T, error) {
	var v T
	m, err := mapfile.Open(path)
	if err != nil {
		return v, err
	}
	defer m.Close()
	if err := mapfile.Guard(func() (err error) { v, err = fn(m); return err }); err != nil {
		var zero T
		return zero, fmt.Errorf("elfsrc: %s: %w", path, err)
	}
	return v, nil
}

func symtabNames(m *mapfile.File, addrs []uint64) (map[uint64]string, error) {
	f, err := elf.NewFile(m)
	if err != nil {
		return nil, err
	}
	st, err := fileRawSymtab(f, m.Data())
	if err != nil {
		return nil, err
	}
	// Functions, and untyped symbols in code (the Go linker's).
	isFunc := func(value, size uint64, info byte, shndx elf.SectionIndex) bool {
		return isFuncSym(f, value, size, info, shndx)
	}
	pcs := append([]uint64(nil), addrs...)
	slices.Sort(pcs)
	pcs = slices.Compact(pcs)
	// near[i]: the highest symbol start in (pcs[i-1], pcs[i]].
	near := make([]uint64, len(pcs))
	has := make([]bool, len(pcs))
	funcs := 0
	st.each(func(k int, value, size uint64, info byte, shndx elf.SectionIndex) {
		if !isFunc(value, size, info, shndx) {
			return
		}
		funcs++
		i, _ := slices.BinarySearch(pcs, value)
		if i < len(pcs) && (!has[i] || value > near[i]) {
			near[i], has[i] = value, true
		}
	})
	if funcs == 0 {
		return nil, nil
	}
	type best struct {
		size uint64
		rank int
		k    int // -1: none yet
		name string
	}
	starts := map[uint64]*best{}
	for i := range pcs {
		if has[i] {
			starts[near[i]] = &best{k: -1}
		}
	}
	st.each(func(k int, value, size uint64, info byte, shndx elf.SectionIndex) {
		b := starts[value]
		if b == nil || !isFunc(value, size, info, shndx) || b.k >= 0 && size < b.size {
			return
		}
		name := st.name(k)
		rank := symRank(name, info)
		if b.k < 0 || size > b.size || rank > b.rank {
			*b = best{size: size, rank: rank, k: k, name: name}
		}
	})
	names := map[uint64]string{}
	var start uint64
	found := false
	for i, pc := range pcs {
		if has[i] {
			start, found = near[i], true
		}
		if !found {
			continue
		}
		if b := starts[start]; pc < start+b.size || b.size == 0 {
			names[pc] = symbolizer.Demangle(b.name)
		}
	}
	return names, nil
}
