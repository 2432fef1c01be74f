// Package symbolizer turns the raw addresses of a rawstack stream into
// functions, files and lines, offline and on any machine.
package symbolizer

// Frame is one symbolized frame. For an address inside inlined code a
// Source returns several frames: the innermost inlined function first, the
// function that contains the machine code last — the order llvm-symbolizer
// prints them in.
type Frame struct {
	Function string // demangled name; "" if unknown
	File     string // source file path as recorded in the debug info; "" if unknown
	Line     int    // 0 if unknown
	Column   int    // 0 if unknown
}

// Source symbolizes addresses of one module. Addresses are module-relative
// as format/SPEC.md defines it: for ELF the virtual address the file's
// program headers and symbols use (what llvm-symbolizer --obj takes); for PE
// the relative virtual address (RVA).
//
// A Source must be safe for concurrent use: the symbolizer resolves the
// addresses of independent modules on several goroutines, and may share a
// Source between goroutines.
type Source interface {
	// Symbolize appends the frames of addr to dst and returns it. It appends
	// nothing, without error, when addr is not covered.
	Symbolize(addr uint64, dst []Frame) ([]Frame, error)
	// Close releases the files the Source holds.
	Close() error
}
