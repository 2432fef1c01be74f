package main

import (
	"os"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/pesrc"
)

// openPESource opens a PE image for addr2line. Addresses are taken as
// llvm-symbolizer --obj takes them for PE: virtual addresses (ImageBase +
// RVA). pesrc decides per address between the image's DWARF, its PDB
// (pdb if given, else found next to the image, in debugDirs, at the path
// the image records or along _NT_SYMBOL_PATH), Go's tables and the
// symbol tables.
func openPESource(path string, debugDirs []string, pdb string) (symbolizer.Source, error) {
	src, err := pesrc.Open(path, &pesrc.Options{
		DebugDirs:  debugDirs,
		SymbolPath: os.Getenv("_NT_SYMBOL_PATH"),
		PDB:        pdb,
	})
	if err != nil {
		return nil, err
	}
	return src.ByVA(), nil
}
