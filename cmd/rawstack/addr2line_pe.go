package main

import (
	"os"
	"path/filepath"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/pe"
	"github.com/rawstack/rawstack/symbolizer/symsrv"
)

// isPEImage says whether the file at path is a PE image ("MZ" header whose
// e_lfanew points at "PE\0\0").
func isPEImage(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var h [64]byte
	if _, err := f.ReadAt(h[:], 0); err != nil || h[0] != 'M' || h[1] != 'Z' {
		return false
	}
	off := int64(h[60]) | int64(h[61])<<8 | int64(h[62])<<16 | int64(h[63])<<24
	var sig [4]byte
	if _, err := f.ReadAt(sig[:], off); err != nil {
		return false
	}
	return string(sig[:]) == "PE\x00\x00"
}

// openPESource opens a PE image for addr2line. Addresses are taken as
// llvm-symbolizer --obj takes them for PE: virtual addresses (ImageBase +
// RVA). The PDB is found next to the image, in debugDirs, at the path the
// image records, or along _NT_SYMBOL_PATH (symbol servers included); with
// no PDB the export table names exported functions.
func openPESource(path string, debugDirs []string) (symbolizer.Source, error) {
	img, err := pe.Open(path)
	if err != nil {
		return nil, err
	}
	base := img.ImageBase
	img.Close()
	cache := ""
	if uc, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(uc, "rawstack", "symbols")
	}
	src, err := symsrv.OpenPE(path, &symsrv.Options{
		DebugDirs:  debugDirs,
		SymbolPath: os.Getenv("_NT_SYMBOL_PATH"),
		CacheDir:   cache,
	})
	if err != nil {
		return nil, err
	}
	return &vaSource{src: src, base: base}, nil
}

// vaSource turns virtual addresses into the RVAs a PE Source takes.
type vaSource struct {
	src  symbolizer.Source
	base uint64
}

func (s *vaSource) Symbolize(addr uint64, dst []symbolizer.Frame) ([]symbolizer.Frame, error) {
	if addr < s.base {
		return dst, nil
	}
	return s.src.Symbolize(addr-s.base, dst)
}

func (s *vaSource) Close() error { return s.src.Close() }
