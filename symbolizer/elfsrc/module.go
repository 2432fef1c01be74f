package elfsrc

import (
	"cmp"
	"debug/elf"
	"fmt"
	"strings"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/idcache"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

func init() {
	symbolizer.RegisterOpener(format.ModuleELF, OpenModule)
	symbolizer.RegisterOpener(format.ModuleUnknown, OpenModule)
}

// OpenModule opens the files of an ELF module of a stream: the binary at
// its (path-mapped) recorded path if its build id matches, and its
// separate debug file from the debug directories, .gnu_debuglink or
// debuginfod.
func OpenModule(m *symbolizer.Module, opts *symbolizer.Options) (*symbolizer.Opened, error) {
	cfg := LocateConfig(opts)
	res, err := locate.Find(locate.Request{Path: opts.MapPath(m.Path), BuildID: m.BuildID}, cfg)
	if err != nil {
		if len(res.Notes) > 0 {
			err = fmt.Errorf("%w (%s)", err, strings.Join(res.Notes, "; "))
		}
		return nil, err
	}
	main := res.Binary
	if main == "" {
		main = res.Debug
	}
	so := &Options{DebugFile: debugIfOther(res)}
	if opts != nil && opts.SymbolsOnly {
		// The symbol table is all that is asked (see Options.NoDWARF).
		so = &Options{NoDWARF: true}
	}
	src, err := Open(main, so)
	if err != nil {
		return nil, err
	}
	return &symbolizer.Opened{Source: src, Segments: src.Segments(), Path: main}, nil
}

// LocateConfig is where every command looks for separate debug files:
// the build-id cache (where it also finds a binary the recorded path does
// not hold), opts.DebugDirs, then /usr/lib/debug (by build id, then .gnu_debuglink
// with its CRC checked), then debuginfod unless opts.NoDebuginfod. report,
// convert, snapshot and addr2line all take their configuration from here,
// so they find the same files.
func LocateConfig(opts *symbolizer.Options) *locate.Config {
	if opts == nil {
		opts = &symbolizer.Options{}
	}
	cfg := &locate.Config{DebugDirs: opts.DebugDirs}
	if !opts.NoBuildIDCache {
		if d := cmp.Or(opts.BuildIDCache, idcache.DefaultDir()); d != "" {
			cfg.BuildIDDirs = []string{d}
		}
	}
	if opts.NoDebuginfod {
		return cfg
	}
	if len(opts.DebuginfodURLs) > 0 {
		cfg.Debuginfod = &locate.Client{URLs: opts.DebuginfodURLs}
	} else {
		cfg.Debuginfod = locate.NewClientFromEnv()
	}
	if cfg.Debuginfod != nil {
		if opts.DebuginfodCache != "" {
			cfg.Debuginfod.CacheDir = opts.DebuginfodCache
		}
		if opts.DebuginfodTimeout > 0 {
			cfg.Debuginfod.Timeout = opts.DebuginfodTimeout
		}
	}
	return cfg
}

// OpenLocated opens the ELF binary at path (a file on this machine) with
// its separate debug file found as [OpenModule] finds a recorded module's:
// the binary's own build id under the debug directories, its
// .gnu_debuglink, then debuginfod. A binary that carries DWARF, or whose
// debug file is nowhere, opens alone. srcOpts.DebugFile, if set, wins.
func OpenLocated(path string, opts *symbolizer.Options, srcOpts *Options) (*Source, error) {
	var so Options
	if srcOpts != nil {
		so = *srcOpts
	}
	if so.DebugFile == "" {
		if res, err := locate.Find(locate.Request{Path: path}, LocateConfig(opts)); err == nil && res.Binary == path {
			so.DebugFile = res.Debug
		}
	}
	return Open(path, &so)
}

func debugIfOther(r locate.Result) string {
	if r.Binary == "" {
		return ""
	}
	return r.Debug
}

// Segments returns the file's PT_LOAD segments.
func (s *Source) Segments() []symbolizer.Segment {
	if s.f == nil {
		return nil // DWARF of another container (NewDWARF)
	}
	var out []symbolizer.Segment
	for _, p := range s.f.Progs {
		if p.Type == elf.PT_LOAD {
			out = append(out, symbolizer.Segment{Off: p.Off, FileSize: p.Filesz, Vaddr: p.Vaddr})
		}
	}
	return out
}

// DebugFile returns the separate debug file of the ELF binary at path
// (buildID, if known, must match), found as [OpenModule] and
// [OpenLocated] find one; "" when the binary carries its own DWARF or no
// debug file was found.
func DebugFile(path string, buildID []byte, opts *symbolizer.Options) string {
	res, err := locate.Find(locate.Request{Path: path, BuildID: buildID}, LocateConfig(opts))
	if err != nil || res.Binary != path {
		return ""
	}
	return res.Debug
}
