// Package pesrc symbolizes PE images (Windows .exe and .dll) from every
// source they carry, per address, the way llvm-symbolizer 19 reads them:
//
//   - DWARF sections inside the image (mingw gcc, clang -gdwarf, Go; the
//     Go linker's GNU-compressed .zdebug_* too), read by the same DWARF
//     reader as ELF files ([elfsrc.NewDWARF]), the outermost frame named
//     from the COFF symbol table as llvm-symbolizer names it;
//   - the PDB the image's CodeView record names, found next to the image,
//     in debug directories or through symbol servers ([symsrv.Locate]);
//   - Go's runtime tables (pclntab) of stripped Go binaries
//     (-ldflags='-s -w'), inline tree included ([gopclntab]);
//   - the COFF symbol table, else the export table, as the last resort.
//
// llvm-symbolizer 19 picks one source per image: the DWARF whenever the
// image has a .debug_info section, else the PDB. A clang image linked
// with lld and a PDB also carries the DWARF of the mingw C runtime, so
// llvm-symbolizer 19 names the runtime from its DWARF and knows nothing
// of the program's own code. This package decides per address instead:
// an address a DWARF compile unit covers is answered from the DWARF
// (exactly llvm-symbolizer 19's answer), any other from the PDB (exactly
// llvm-symbolizer 19's answer for the image without its DWARF), then the
// Go tables, then the symbol tables.
//
//	src, err := pesrc.Open("prog.exe", &pesrc.Options{SymbolPath: os.Getenv("_NT_SYMBOL_PATH")})
//	if err != nil { ... }
//	defer src.Close()
//	frames, err := src.Symbolize(rva, nil) // or src.ByVA() for ImageBase+RVA
//
// Importing the package registers it for the PE modules of a trace
// (format.ModulePE): [OpenModule] finds the image and its PDB by the
// identity the trace recorded.
package pesrc

import (
	"bytes"
	"context"
	debugpe "debug/pe"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rawstack/rawstack/internal/gopclntab"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/elfsrc"
	"github.com/rawstack/rawstack/symbolizer/pdb"
	"github.com/rawstack/rawstack/symbolizer/pe"
	"github.com/rawstack/rawstack/symbolizer/symsrv"
)

// Options say where to find a PDB and how to name functions.
type Options struct {
	// DebugDirs are searched for the PDB, flat and as symbol stores.
	DebugDirs []string
	// SymbolPath is a symbol path in _NT_SYMBOL_PATH syntax (symbol
	// servers included).
	SymbolPath string
	// CacheDir is where symbol-server downloads go; "" means the user
	// cache directory's rawstack/symbols.
	CacheDir string
	// PDB, if set, is the PDB to use (it must match the image); no
	// search is made.
	PDB string
	// NoPDB skips the PDB even when one is found.
	NoPDB bool
	// NoDemangle keeps names as the debug information spells them.
	NoDemangle bool
	// Logf, if set, receives one line per place searched for the PDB
	// and why a source was not used.
	Logf func(format string, args ...any)
}

func (o *Options) logf(format string, args ...any) {
	if o != nil && o.Logf != nil {
		o.Logf(format, args...)
	}
}

// Caps on what is read from an image.
const (
	maxSection   = 1 << 30 // one DWARF section or pclntab
	maxCandidate = 16      // pclntab headers tried in a stripped Go image
)

// Source symbolizes the RVAs of one PE image. It is safe for concurrent use.
type Source struct {
	path     string
	img      *pe.File
	base     uint64
	dwarf    *elfsrc.Source // DWARF and symbol tables; never nil
	hasDW    bool
	pdb      *pdb.File
	pdbErr   error
	dwarfErr error
	gopcln   *gopclntab.Table
}

// Open opens the PE image at path and every symbol source it has.
func Open(path string, opts *Options) (*Source, error) {
	img, err := pe.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pesrc: %w", err)
	}
	s, err := newSource(img, path, opts)
	if err != nil {
		img.Close()
		return nil, err
	}
	return s, nil
}

// NewFile reads a PE image of the given size from r; name is used in
// errors and as the place next to which the PDB is looked for.
func NewFile(r io.ReaderAt, name string, size int64, opts *Options) (*Source, error) {
	img, err := pe.NewFile(r, name, size)
	if err != nil {
		return nil, fmt.Errorf("pesrc: %w", err)
	}
	return newSource(img, name, opts)
}

func newSource(img *pe.File, path string, opts *Options) (*Source, error) {
	s := &Source{path: path, img: img, base: img.ImageBase}
	syms, err := symbols(img)
	if err != nil {
		// A damaged export table loses the export names only.
		opts.logf("pesrc: %s: %v", path, err)
	}
	c := elfsrc.Container{
		Name:       path,
		Order:      binary.LittleEndian,
		Section:    func(name string) ([]byte, error) { return sectionData(img, name) },
		Symbols:    syms,
		NoDemangle: opts != nil && opts.NoDemangle,
		Dir0:       true,
		Demangle:   demangler(img.Machine == debugpe.IMAGE_FILE_MACHINE_I386),
	}
	dw, err := elfsrc.NewDWARF(c)
	if err != nil {
		// Damaged DWARF sections lose the DWARF only: the PDB, Go's
		// tables and the symbols still answer.
		s.dwarfErr = err
		opts.logf("pesrc: %v", err)
		c.Section = func(string) ([]byte, error) { return nil, nil }
		if dw, err = elfsrc.NewDWARF(c); err != nil {
			return nil, fmt.Errorf("pesrc: %w", err)
		}
	}
	s.dwarf, s.hasDW = dw, dw.HasDWARF()
	if opts == nil || !opts.NoPDB {
		s.pdb, s.pdbErr = openPDB(img, path, opts)
		if s.pdbErr != nil {
			opts.logf("pesrc: %s: %v", path, s.pdbErr)
		}
	}
	if !s.hasDW && s.pdb == nil {
		s.gopcln = findPclntab(img)
	}
	return s, nil
}

// openPDB finds and opens the image's PDB; nil without error when the
// image names none.
func openPDB(img *pe.File, path string, opts *Options) (*pdb.File, error) {
	cv, err := img.CodeView()
	if errors.Is(err, pe.ErrNoCodeView) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p := ""
	if opts != nil && opts.PDB != "" {
		p = opts.PDB
	} else {
		so := &symsrv.Options{}
		if opts != nil {
			so.DebugDirs, so.SymbolPath, so.CacheDir, so.Logf = opts.DebugDirs, opts.SymbolPath, opts.CacheDir, opts.Logf
		}
		if p, err = symsrv.Locate(context.Background(), path, cv, so); err != nil {
			return nil, err
		}
	}
	f, err := pdb.Open(p)
	if err != nil {
		return nil, err
	}
	if [16]byte(f.GUID) != [16]byte(cv.GUID) || (f.Age != cv.Age && f.DBIAge != cv.Age) {
		f.Close()
		return nil, fmt.Errorf("pdb %s does not match %s (%s)", p, path, cv.DebugID())
	}
	return f, nil
}

// sectionData returns the bytes of the named section as the loader and
// llvm-symbolizer see them (the smaller of the virtual size and the raw
// size: the rest of the raw data is file alignment), nil if absent.
func sectionData(img *pe.File, name string) ([]byte, error) {
	sec := img.PE.Section(name)
	if sec == nil {
		return nil, nil
	}
	n := min(sec.VirtualSize, sec.Size)
	if sec.VirtualSize == 0 {
		n = sec.Size
	}
	if n > maxSection {
		return nil, &pe.FormatError{File: img.Name, Offset: int64(sec.Offset), Msg: fmt.Sprintf("section %s of %d bytes", name, n)}
	}
	// Read, not allocate, n bytes: a damaged header may claim more than
	// the file holds.
	b, err := io.ReadAll(io.LimitReader(sec.Open(), int64(n)))
	if err != nil {
		return nil, &pe.FormatError{File: img.Name, Offset: int64(sec.Offset), Msg: fmt.Sprintf("reading section %s: %v", name, err)}
	}
	if uint32(len(b)) < n {
		return nil, &pe.FormatError{File: img.Name, Offset: int64(sec.Offset), Msg: fmt.Sprintf("section %s: %d of %d bytes in the file", name, len(b), n)}
	}
	return b, nil
}

// ImageBase is the image's preferred base: a virtual address is
// ImageBase + RVA.
func (s *Source) ImageBase() uint64 { return s.base }

// HasDWARF reports whether the image carries DWARF.
func (s *Source) HasDWARF() bool { return s.hasDW }

// HasPDB reports whether a matching PDB was found.
func (s *Source) HasPDB() bool { return s.pdb != nil }

// PDBError says why the image's PDB was not used (nil if it was, or if
// the image names none).
func (s *Source) PDBError() error { return s.pdbErr }

// DWARFError says why the image's DWARF sections were not used (nil if
// they were, or if it has none).
func (s *Source) DWARFError() error { return s.dwarfErr }

// HasGoTables reports whether Go's runtime tables name the image's code.
func (s *Source) HasGoTables() bool { return s.gopcln != nil }

// Symbolize implements symbolizer.Source for an RVA: from the DWARF where
// a compile unit covers it, else the PDB, else Go's runtime tables, else
// the COFF symbol table or exports (see the package comment).
func (s *Source) Symbolize(rva uint64, dst []symbolizer.Frame) ([]symbolizer.Frame, error) {
	va := s.base + rva
	if va < s.base {
		return dst, nil
	}
	if s.hasDW && s.dwarf.InDWARF(va) {
		return s.dwarf.Symbolize(va, dst)
	}
	n := len(dst)
	if s.pdb != nil {
		var err error
		if dst, err = s.pdb.Symbolize(rva, dst); len(dst) > n || err != nil {
			return dst, err
		}
	}
	if s.gopcln != nil {
		var buf [16]gopclntab.Frame
		if frs, ok := s.gopcln.Symbolize(va, buf[:0]); ok {
			for _, f := range frs {
				dst = append(dst, symbolizer.Frame{Function: f.Function, File: f.File, Line: f.Line})
			}
			return dst, nil
		}
	}
	return s.dwarf.Symbolize(va, dst)
}

// Prefetch builds the tables of the DWARF units holding the given RVAs on
// workers goroutines, so a batch of addresses uses every core.
func (s *Source) Prefetch(rvas []uint64, workers int) {
	if !s.hasDW {
		return
	}
	vas := make([]uint64, len(rvas))
	for i, r := range rvas {
		vas[i] = s.base + r
	}
	s.dwarf.Prefetch(vas, workers)
}

// Close releases the image and the PDB.
func (s *Source) Close() error {
	err := s.img.Close()
	if s.pdb != nil {
		if e := s.pdb.Close(); err == nil {
			err = e
		}
	}
	return err
}

// ByVA returns a Source that takes virtual addresses (ImageBase + RVA),
// as llvm-symbolizer --obj takes them, instead of RVAs.
func (s *Source) ByVA() symbolizer.Source { return vaSource{s} }

type vaSource struct{ s *Source }

func (v vaSource) Symbolize(va uint64, dst []symbolizer.Frame) ([]symbolizer.Frame, error) {
	if va < v.s.base {
		return dst, nil
	}
	return v.s.Symbolize(va-v.s.base, dst)
}

func (v vaSource) Close() error { return v.s.Close() }

func (v vaSource) Prefetch(vas []uint64, workers int) {
	rvas := make([]uint64, 0, len(vas))
	for _, a := range vas {
		if a >= v.s.base {
			rvas = append(rvas, a-v.s.base)
		}
	}
	v.s.Prefetch(rvas, workers)
}

// IsPE reports whether the file at path is a PE image: an "MZ" header
// whose e_lfanew points at "PE\0\0".
func IsPE(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var h [64]byte
	if _, err := f.ReadAt(h[:], 0); err != nil || h[0] != 'M' || h[1] != 'Z' {
		return false
	}
	off := int64(binary.LittleEndian.Uint32(h[60:]))
	var sig [4]byte
	if _, err := f.ReadAt(sig[:], off); err != nil {
		return false
	}
	return bytes.Equal(sig[:], []byte("PE\x00\x00"))
}
