package elfsrc

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/rawstack/rawstack/internal/mapfile"
	"github.com/rawstack/rawstack/internal/radix"
	"github.com/rawstack/rawstack/symbolizer"
)

// SymIndex is an ELF file's function symbols reduced to what naming a
// code address as [SymtabNames] does needs: one entry per distinct start
// address, sorted, with the size and raw name of the symbol chosen there
// (the largest, then the best ranked). Its bytes are its on-disk form:
// rawstack snapshot keeps indexes in a cache directory by build id, so a
// second snapshot of the same libraries reads a few hundred KiB instead
// of walking their symbol tables.
//
// The format (little-endian):
//
//	magic "RSSYMIX\x01"
//	u32 build id length (at most 64), u32 entries, u32 string bytes, u32 0
//	build id
//	entries × {u64 start, u64 size, u32 name offset, u32 name length}, starts increasing
//	strings
type SymIndex struct {
	data []byte
	ents []byte // the entries
	strs []byte
	n    int
}

const (
	symIndexMagic = "RSSYMIX\x01"
	symIndexHead  = 24
	symIndexEnt   = 24
	// Caps on what a cache file may claim: far above any real library
	// (libc's debug file: ~6,000 functions, ~200 KiB of names).
	maxSymIndexEntries = 1 << 22
	maxSymIndexStrings = 1 << 28
	maxSymIndexFile    = symIndexHead + 64 + maxSymIndexEntries*symIndexEnt + maxSymIndexStrings
)

// isFuncSym says a symbol of f names code: a function, or an untyped
// symbol with a size in an executable section (the Go linker's).
func isFuncSym(f *elf.File, value, size uint64, info byte, shndx elf.SectionIndex) bool {
	if shndx == elf.SHN_UNDEF || int(shndx) >= len(f.Sections) || value == 0 {
		return false
	}
	switch elf.ST_TYPE(info) {
	case elf.STT_FUNC, elf.STT_GNU_IFUNC:
		return true
	case elf.STT_NOTYPE:
		return f.Sections[shndx].Flags&elf.SHF_EXECINSTR != 0 && size != 0
	}
	return false
}

// BuildSymIndex builds the index of the symbol table (else the dynamic
// one) of the ELF file at path, recording buildID in it; nil, nil when
// the file has no function symbols.
func BuildSymIndex(path string, buildID []byte) (*SymIndex, error) {
	if len(buildID) > 64 {
		return nil, fmt.Errorf("elfsrc: %s: build id of %d bytes", path, len(buildID))
	}
	return mapped(path, func(m *mapfile.File) (*SymIndex, error) { return buildSymIndex(m, buildID) })
}

func buildSymIndex(m *mapfile.File, buildID []byte) (*SymIndex, error) {
	f, err := elf.NewFile(m)
	if err != nil {
		return nil, err
	}
	st, err := fileRawSymtab(f, m.Data())
	if err != nil {
		return nil, err
	}
	type sym struct {
		value, size uint64
		k           int
		info        byte
	}
	var syms []sym
	st.each(func(k int, value, size uint64, info byte, shndx elf.SectionIndex) {
		if isFuncSym(f, value, size, info, shndx) {
			syms = append(syms, sym{value, size, k, info})
		}
	})
	if len(syms) == 0 {
		return nil, nil
	}
	// By start, stably: the table's order stays within one start. A
	// radix sort, as libc's debug file has ~7,000 functions and a
	// comparison sort of them was most of a cold index build.
	syms = radix.SortByKey(syms, func(s sym) uint64 { return s.value })
	// At one start, the symbol SymtabNames keeps: the largest, then the
	// best ranked, then the first in the table. Names are read only where
	// aliases of one size make the rank matter.
	keep := syms[:0]
	for i := 0; i < len(syms); {
		j, big := i, syms[i].size
		for j < len(syms) && syms[j].value == syms[i].value {
			big = max(big, syms[j].size)
			j++
		}
		best, bestRank, tied := -1, 0, 0
		for c := i; c < j; c++ {
			if syms[c].size == big {
				tied++
				if best < 0 {
					best = c
				}
			}
		}
		if tied > 1 {
			best = -1
			for c := i; c < j; c++ {
				if syms[c].size != big {
					continue
				}
				if r := symRank(st.name(syms[c].k), syms[c].info); best < 0 || r > bestRank {
					best, bestRank = c, r
				}
			}
		}
		keep = append(keep, syms[best])
		i = j
	}
	syms = keep
	var strs []byte
	ents := make([]byte, 0, len(syms)*symIndexEnt)
	for _, s := range syms {
		n := len(strs)
		if st.raw != nil {
			strs = append(strs, st.raw(s.k)...)
		} else {
			strs = append(strs, st.name(s.k)...)
		}
		ents = binary.LittleEndian.AppendUint64(ents, s.value)
		ents = binary.LittleEndian.AppendUint64(ents, s.size)
		ents = binary.LittleEndian.AppendUint32(ents, uint32(n))
		ents = binary.LittleEndian.AppendUint32(ents, uint32(len(strs)-n))
	}
	if len(syms) > maxSymIndexEntries || len(strs) > maxSymIndexStrings {
		return nil, fmt.Errorf("symbol index too large: %d functions, %d bytes of names", len(syms), len(strs))
	}
	b := make([]byte, 0, symIndexHead+len(buildID)+len(ents)+len(strs))
	b = append(b, symIndexMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(buildID)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(syms)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(strs)))
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, buildID...)
	b = append(b, ents...)
	b = append(b, strs...)
	return ParseSymIndex(b, buildID)
}

// ParseSymIndex checks the bytes of an index (from a cache file:
// untrusted) and returns it: every size within the caps and the data,
// starts increasing, names inside the strings, and the build id it
// records equal to buildID. Errors name the offset.
func ParseSymIndex(b, buildID []byte) (*SymIndex, error) {
	if len(b) > maxSymIndexFile {
		return nil, fmt.Errorf("symbol index: %d bytes, more than %d", len(b), maxSymIndexFile)
	}
	if len(b) < symIndexHead || string(b[:8]) != symIndexMagic {
		return nil, errors.New("symbol index: offset 0: not a symbol index (bad magic)")
	}
	le := binary.LittleEndian
	idLen, n, strLen := uint64(le.Uint32(b[8:])), uint64(le.Uint32(b[12:])), uint64(le.Uint32(b[16:]))
	switch {
	case idLen > 64:
		return nil, fmt.Errorf("symbol index: offset 8: build id of %d bytes", idLen)
	case n > maxSymIndexEntries:
		return nil, fmt.Errorf("symbol index: offset 12: %d entries, more than %d", n, maxSymIndexEntries)
	case strLen > maxSymIndexStrings:
		return nil, fmt.Errorf("symbol index: offset 16: %d bytes of names, more than %d", strLen, maxSymIndexStrings)
	case le.Uint32(b[20:]) != 0:
		return nil, errors.New("symbol index: offset 20: reserved field not 0")
	}
	if want := symIndexHead + idLen + n*symIndexEnt + strLen; uint64(len(b)) != want {
		return nil, fmt.Errorf("symbol index: %d bytes, its header says %d", len(b), want)
	}
	if !bytes.Equal(b[symIndexHead:symIndexHead+idLen], buildID) {
		return nil, fmt.Errorf("symbol index: offset %d: build id %x, want %x", symIndexHead, b[symIndexHead:symIndexHead+idLen], buildID)
	}
	entAt := symIndexHead + idLen
	x := &SymIndex{data: b, ents: b[entAt : entAt+n*symIndexEnt], strs: b[entAt+n*symIndexEnt:], n: int(n)}
	var prev uint64
	for i := 0; i < x.n; i++ {
		e := x.ents[i*symIndexEnt:]
		start, off, l := le.Uint64(e), uint64(le.Uint32(e[16:])), uint64(le.Uint32(e[20:]))
		if i > 0 && start <= prev {
			return nil, fmt.Errorf("symbol index: offset %d: entry %d starts at %#x, not after %#x", entAt+uint64(i)*symIndexEnt, i, start, prev)
		}
		if off > strLen || l > strLen-off {
			return nil, fmt.Errorf("symbol index: offset %d: entry %d names bytes %d+%d of %d", entAt+uint64(i)*symIndexEnt+16, i, off, l, strLen)
		}
		prev = start
	}
	return x, nil
}

// Bytes returns the index's on-disk form.
func (x *SymIndex) Bytes() []byte { return x.data }

// Len returns the number of entries.
func (x *SymIndex) Len() int { return x.n }

// Name names the link-time address addr as [SymtabNames] does: the entry
// starting nearest at or below it, if its range holds addr (or it has no
// size), demangled; "" otherwise.
func (x *SymIndex) Name(addr uint64) string {
	le := binary.LittleEndian
	// The first entry starting above addr.
	i, j := 0, x.n
	for i < j {
		h := int(uint(i+j) >> 1)
		if le.Uint64(x.ents[h*symIndexEnt:]) <= addr {
			i = h + 1
		} else {
			j = h
		}
	}
	if i == 0 {
		return ""
	}
	e := x.ents[(i-1)*symIndexEnt:]
	start, size := le.Uint64(e), le.Uint64(e[8:])
	if size != 0 && addr-start >= size {
		return ""
	}
	off, l := le.Uint32(e[16:]), le.Uint32(e[20:])
	return symbolizer.Demangle(string(x.strs[off : off+l]))
}

// SymIndexFile is where dir keeps the index of the file with build id
// buildID; kind tells apart indexes of one build id made from different
// files (a library and its separate debug file).
func SymIndexFile(dir string, buildID []byte, kind string) string {
	return filepath.Join(dir, hex.EncodeToString(buildID)+"."+kind+".symidx")
}

// CachedSymIndex returns the index of the ELF file at path (build id
// buildID) from dir, building it and storing it there first when dir has
// no valid one. A cache file that fails ParseSymIndex is rebuilt over;
// one that cannot be written only costs the next run the build again.
// Files without a build id are not cached.
func CachedSymIndex(dir, path string, buildID []byte, kind string) (*SymIndex, error) {
	if len(buildID) == 0 || dir == "" {
		return BuildSymIndex(path, buildID)
	}
	if x, err := LoadSymIndex(dir, buildID, kind); err == nil {
		return x, nil
	}
	x, err := BuildSymIndex(path, buildID)
	if err != nil || x == nil {
		return x, err
	}
	writeCacheFile(dir, SymIndexFile(dir, buildID, kind), x.Bytes())
	return x, nil
}

// LoadSymIndex returns the index dir holds for build id buildID and
// kind, checked by ParseSymIndex.
func LoadSymIndex(dir string, buildID []byte, kind string) (*SymIndex, error) {
	name := SymIndexFile(dir, buildID, kind)
	b, err := readCapped(name, maxSymIndexFile)
	if err != nil {
		return nil, err
	}
	x, err := ParseSymIndex(b, buildID)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return x, nil
}

// readCapped reads the file at path if it holds at most max bytes.
func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > max {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes", path, max)
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	return b, nil
}

// writeCacheFile writes b to name in dir through a temporary file renamed
// over it, so a reader never sees half a file; errors are dropped.
func writeCacheFile(dir, name string, b []byte) {
	if os.MkdirAll(dir, 0o755) != nil {
		return
	}
	tmp, err := os.CreateTemp(dir, ".symidx-*")
	if err != nil {
		return
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
}
