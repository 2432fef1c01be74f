// Package sources is rawstack's one symbolization entry: it links every
// symbol source and turns the options every command shares into
// [symbolizer.Options]. A command that names frames imports it, and
// nothing else, to get every source; a new source is added here once.
//
// The sources it links, by module kind (format.ModuleKind):
//
//   - ELF (and modules of unknown kind): symbol tables, DWARF 2–5, Go's
//     pclntab; separate debug files by build id, .gnu_debuglink and
//     debuginfod (symbolizer/elfsrc).
//   - PE: PDBs (local, along _NT_SYMBOL_PATH and symbol servers), DWARF,
//     Go's tables and COFF symbol tables, per address (symbolizer/pesrc).
//   - Kernel: kallsyms of the recorded kernel (symbolizer/kallsyms).
//
// JIT code is named by [symbolizer.Build] itself, from the JITCode events
// a trace carries (perf maps and jitdump files copied at record time): it
// needs no file and so no opener.
//
// Downloads (debuginfod, symbol servers) go through symbolizer/fetch; a
// command links its HTTP getter (symbolizer/fetch/httpfetch) or hands
// them to rawstack-fetch, as its start-up budget allows.
//
//	var f sources.Flags
//	f.Register(flag.CommandLine)
//	flag.Parse()
//	o, err := f.Options()
//	if err != nil { ... }
//	p, err := symbolizer.Build(r, o)
package sources

import (
	"flag"
	"os"
	"strconv"
	"strings"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/elfsrc"
	_ "github.com/rawstack/rawstack/symbolizer/kallsyms" // kernel symbols
	"github.com/rawstack/rawstack/symbolizer/pesrc"
)

// Kinds returns the module kinds that have an opener, in ascending order.
// With this package linked it is the same list in every program.
func Kinds() []format.ModuleKind { return symbolizer.OpenerKinds() }

// Flags are the command-line options of symbolization, shared by every
// command that symbolizes a trace (rawstack report, convert, view;
// rawstack-otlp convert).
type Flags struct {
	PathMaps     []string // OLD=NEW
	DebugDirs    []string
	NoDebuginfod bool
	Kallsyms     string
	SymbolPath   string
	SymbolCache  string
	IDCache      string
	NoIDCache    bool
	Workers      int
}

type multiFlag struct{ p *[]string }

func (m multiFlag) String() string {
	if m.p == nil {
		return ""
	}
	return strings.Join(*m.p, ",")
}
func (m multiFlag) Set(s string) error { *m.p = append(*m.p, s); return nil }

// Register defines the flags on fs: --path-map, --debug-dir,
// --no-debuginfod, --kallsyms, --symbol-path, --symbol-cache,
// --buildid-cache, --no-buildid-cache and -j.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.Var(multiFlag{&f.PathMaps}, "path-map", "OLD=NEW: read files recorded under OLD from NEW (repeatable)")
	fs.Var(multiFlag{&f.DebugDirs}, "debug-dir", "directory of separate debug files (ELF by build id and debuglink; PE images and PDBs, flat or as a symbol store), searched before /usr/lib/debug (repeatable)")
	fs.BoolVar(&f.NoDebuginfod, "no-debuginfod", false, "do not ask DEBUGINFOD_URLS servers for missing debug files")
	fs.StringVar(&f.Kallsyms, "kallsyms", "", "kernel symbol table of the recorded kernel (default: /proc/kallsyms if the running kernel is the recorded one)")
	fs.StringVar(&f.SymbolPath, "symbol-path", "", "where PE modules' images and PDBs are searched, in _NT_SYMBOL_PATH syntax, symbol servers included (default: $_NT_SYMBOL_PATH)")
	fs.StringVar(&f.SymbolCache, "symbol-cache", "", "where symbol-server downloads go for symbol-path elements that name no cache (default: the user cache directory's rawstack/symbols)")
	fs.StringVar(&f.IDCache, "buildid-cache", "", "the build-id cache a recording filled with the files of containers' modules, searched first (default $RAWSTACK_BUILDID_CACHE, else ~/.cache/rawstack/buildid)")
	fs.BoolVar(&f.NoIDCache, "no-buildid-cache", false, "do not look in the build-id cache")
	fs.IntVar(&f.Workers, "j", 2, "modules symbolized in parallel")
}

// Args returns the flags as Register parses them, for a companion
// command that symbolizes on this command's behalf (rawstack convert
// --to otlp runs rawstack-otlp convert).
func (f *Flags) Args() []string {
	var a []string
	for _, m := range f.PathMaps {
		a = append(a, "--path-map", m)
	}
	for _, d := range f.DebugDirs {
		a = append(a, "--debug-dir", d)
	}
	if f.NoDebuginfod {
		a = append(a, "--no-debuginfod")
	}
	if f.Kallsyms != "" {
		a = append(a, "--kallsyms", f.Kallsyms)
	}
	if f.SymbolPath != "" {
		a = append(a, "--symbol-path", f.SymbolPath)
	}
	if f.SymbolCache != "" {
		a = append(a, "--symbol-cache", f.SymbolCache)
	}
	if f.IDCache != "" {
		a = append(a, "--buildid-cache", f.IDCache)
	}
	if f.NoIDCache {
		a = append(a, "--no-buildid-cache")
	}
	if f.Workers != 0 {
		a = append(a, "-j", strconv.Itoa(f.Workers))
	}
	return a
}

// Options returns the symbolizer options the flags set. A malformed
// --path-map is an error.
func (f *Flags) Options() (*symbolizer.Options, error) {
	o := &symbolizer.Options{DebugDirs: f.DebugDirs, NoDebuginfod: f.NoDebuginfod, Kallsyms: f.Kallsyms,
		SymbolPath: f.SymbolPath, SymbolCache: f.SymbolCache, Workers: f.Workers,
		BuildIDCache: f.IDCache, NoBuildIDCache: f.NoIDCache}
	for _, pm := range f.PathMaps {
		m, err := symbolizer.ParsePathMap(pm)
		if err != nil {
			return nil, err
		}
		o.PathMap = append(o.PathMap, m)
	}
	return o, nil
}

// OpenFile opens the binary at path, ELF or PE, as llvm-symbolizer --obj
// does: addresses are the ones its symbols and debug information use
// (ELF: the virtual addresses of its program headers; PE: ImageBase +
// RVA). debugFile, if set, is the ELF binary's separate debug file or the
// PE image's PDB; otherwise they are found as for a trace's modules, with
// opts (debug directories, debuginfod, the symbol path).
func OpenFile(path string, opts *symbolizer.Options, debugFile string) (symbolizer.Source, error) {
	if opts == nil {
		opts = &symbolizer.Options{}
	}
	if pesrc.IsPE(path) {
		sp := opts.SymbolPath
		if sp == "" {
			sp = os.Getenv("_NT_SYMBOL_PATH")
		}
		src, err := pesrc.Open(path, &pesrc.Options{DebugDirs: opts.DebugDirs, SymbolPath: sp, CacheDir: opts.SymbolCache, PDB: debugFile})
		if err != nil {
			return nil, err
		}
		return src.ByVA(), nil
	}
	src, err := elfsrc.OpenLocated(path, opts, &elfsrc.Options{DebugFile: debugFile})
	if err != nil {
		return nil, err
	}
	return src, nil
}
