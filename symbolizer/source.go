// Package symbolizer turns the raw addresses of a rawstack stream into
// functions, files and lines, offline and on any machine.
//
// [Build] reads a stream once: it keeps a time-aware [ModuleDB] (a range
// of addresses may hold one module, be unloaded and hold another),
// normalizes every distinct stack to module-relative addresses
// ([Module.Relative], as format/SPEC.md defines them), aggregates samples
// by stack, and then symbolizes each distinct address of each module file
// once, independent modules in parallel. Addresses with no module or no
// debug information stay in the profile as "module+0xoff" or "0xaddr".
//
// Symbol sources implement [Source] and register an [OpenFunc] per module
// kind. Package symbolizer/sources links every one of them (ELF, DWARF and
// Go tables; PE, PDB and COFF; kernel symbols) and turns command-line
// flags into [Options]; every command that symbolizes imports it:
//
//	import _ "github.com/rawstack/rawstack/symbolizer/sources"
//
//	r, err := format.Open("trace.rawstack")
//	if err != nil { ... }
//	defer r.Close()
//	p, err := symbolizer.Build(r, &symbolizer.Options{PathMap: []symbolizer.PathMap{{Old: "/build", New: "/src"}}})
//	if err != nil { ... }
//	err = pprof.Write(w, p) // or folded.Write, text.Write (symbolizer/export/...)
//
// Frames follow llvm-symbolizer's conventions (innermost inlined frame
// first, names demangled, [AppendLLVM] prints its text format), and the
// tests hold the answers to llvm-symbolizer's on real binaries.
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
