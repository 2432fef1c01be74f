package symbolizer

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rawstack/rawstack/format"
)

// PathMap rewrites a path prefix recorded on the host (Old) to where the
// files are on this machine (New), as --path-map OLD=NEW.
type PathMap struct{ Old, New string }

// ParsePathMap parses "OLD=NEW".
func ParsePathMap(s string) (PathMap, error) {
	i := strings.IndexByte(s, '=')
	if i <= 0 {
		return PathMap{}, fmt.Errorf("symbolizer: path map %q: want OLD=NEW", s)
	}
	return PathMap{Old: s[:i], New: s[i+1:]}, nil
}

// Options tune how modules are found and symbolized. The zero value is
// valid: files are read at their recorded paths, debug files are looked
// up in /usr/lib/debug, debuginfod is asked when DEBUGINFOD_URLS is set.
type Options struct {
	// PathMap rewrites recorded paths; the longest matching Old wins.
	PathMap []PathMap
	// DebugDirs are searched for separate debug files, before
	// /usr/lib/debug: DIR/.build-id/xx/rest.debug, and for a
	// .gnu_debuglink name N: DIR/N and DIR/<binary's dir>/N.
	DebugDirs []string
	// BuildIDCache is the build-id cache a recorder filled with the files
	// of other mount namespaces' modules (containers); "" means the
	// default one ($RAWSTACK_BUILDID_CACHE, else the user cache
	// directory's rawstack/buildid). It is searched before the debug
	// directories. NoBuildIDCache leaves it out.
	BuildIDCache   string
	NoBuildIDCache bool
	// DebuginfodURLs are debuginfod servers; nil means the
	// DEBUGINFOD_URLS environment variable (space separated).
	DebuginfodURLs []string
	// NoDebuginfod disables debuginfod even when DEBUGINFOD_URLS is set.
	NoDebuginfod bool
	// SymbolsOnly names ELF functions from the binaries' symbol tables
	// alone: no DWARF is read and no separate debug file looked for. It is
	// what a raw profile's checks need (is this CPython's evaluation
	// loop?), where a binary's DWARF would cost a daemon tens of MiB.
	SymbolsOnly bool
	// DebuginfodCache is where downloaded files are kept; "" means
	// $DEBUGINFOD_CACHE_PATH or the user cache directory.
	DebuginfodCache string
	// DebuginfodTimeout bounds one download; 0 means 30s.
	DebuginfodTimeout time.Duration
	// Kallsyms is a kernel symbol table (/proc/kallsyms format) for the
	// recorded kernel; "" means /proc/kallsyms when the running kernel
	// is the recorded one (same build id).
	Kallsyms string
	// SymbolPath is where PE modules' images (by name and code id) and
	// PDBs (by GUID and age) are searched after DebugDirs, in
	// _NT_SYMBOL_PATH syntax, symbol servers included; "" means the
	// _NT_SYMBOL_PATH environment variable.
	SymbolPath string
	// SymbolCache is where symbol-server downloads go for SymbolPath
	// elements that name no cache; "" means the user cache directory's
	// rawstack/symbols.
	SymbolCache string
	// NoRecordedPaths finds PE modules by identity only (code id, PDB
	// GUID and age, by base name) in DebugDirs and along SymbolPath, and
	// opens nothing at the directories a trace recorded: for a service
	// that symbolizes other machines' traces, whose paths are not theirs
	// to name. (ELF modules: such a caller leaves Module.Path empty.)
	NoRecordedPaths bool
	// TraceDir is the directory of the trace file, where PE images are
	// also looked for by base name and code id (and their PDBs next to
	// them), after DebugDirs: a trace copied with its binaries symbolizes
	// where it lands. [Build] sets it from a Reader that [format.Open]
	// made, unless it is set.
	TraceDir string
	// Workers is how many modules are symbolized at once; 0 means 2.
	Workers int
	// Progress, if set, is called as locations are symbolized.
	Progress func(done, total int)
	// Timeline keeps every sample with its time and thread, and the
	// spans, markers and counters, in Profile.Timeline (for the
	// timeline exporters); it costs memory per sample.
	Timeline bool
	// Warn, if set, receives non-fatal problems (a module that cannot be
	// opened, a damaged chunk).
	Warn func(error)
}

// MapPath applies the path map to a recorded path.
func (o *Options) MapPath(p string) string {
	if o == nil {
		return p
	}
	best := -1
	for i, m := range o.PathMap {
		if strings.HasPrefix(p, m.Old) && (best < 0 || len(m.Old) > len(o.PathMap[best].Old)) {
			best = i
		}
	}
	if best < 0 {
		return p
	}
	return o.PathMap[best].New + p[len(o.PathMap[best].Old):]
}

func (o *Options) warn(err error) {
	if o != nil && o.Warn != nil {
		o.Warn(err)
	}
}

// Opened is a module opened for symbolization.
type Opened struct {
	Source Source
	// Segments are the file's loadable segments (ELF), used to turn file
	// offsets into the addresses Source takes.
	Segments []Segment
	// Path is the file that was opened, for reports.
	Path string
}

// OpenFunc opens the file of module m for symbolization.
type OpenFunc func(m *Module, opts *Options) (*Opened, error)

// openers are indexed by kind (a uint8): an array in the data segment,
// where a map would be made by an init function in every program that
// links the symbolizer (rawstack --help included).
var (
	openersMu sync.RWMutex
	openers   [256]OpenFunc
)

// RegisterOpener makes open the way modules of kind are opened. Symbol
// source packages register themselves from init; a program links every
// one of them by importing github.com/rawstack/rawstack/symbolizer/sources.
func RegisterOpener(kind format.ModuleKind, open OpenFunc) {
	openersMu.Lock()
	defer openersMu.Unlock()
	openers[kind] = open
}

// OpenerKinds returns the module kinds that have an opener, in ascending
// order: what the symbol sources linked into the program can name. A
// program links them all through symbolizer/sources.
func OpenerKinds() []format.ModuleKind {
	openersMu.RLock()
	defer openersMu.RUnlock()
	var kinds []format.ModuleKind
	for k, open := range openers {
		if open != nil {
			kinds = append(kinds, format.ModuleKind(k))
		}
	}
	return kinds
}

func opener(kind format.ModuleKind) OpenFunc {
	openersMu.RLock()
	defer openersMu.RUnlock()
	return openers[kind]
}
