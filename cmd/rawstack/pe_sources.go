package main

// PE modules of a trace (report, convert) are symbolized from their DWARF,
// PDB, Go tables and symbol tables.
import _ "github.com/rawstack/rawstack/symbolizer/pesrc"
