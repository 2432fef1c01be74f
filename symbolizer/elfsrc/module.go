package elfsrc

import (
	"debug/elf"
	"fmt"
	"strings"

	"github.com/rawstack/rawstack/format"
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
	cfg := &locate.Config{DebugDirs: opts.DebugDirs}
	if !opts.NoDebuginfod {
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
	}
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
	src, err := Open(main, &Options{DebugFile: debugIfOther(res)})
	if err != nil {
		return nil, err
	}
	return &symbolizer.Opened{Source: src, Segments: src.Segments(), Path: main}, nil
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
