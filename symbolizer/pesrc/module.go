package pesrc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/pdb"
	"github.com/rawstack/rawstack/symbolizer/pe"
	"github.com/rawstack/rawstack/symbolizer/symsrv"
)

func init() {
	symbolizer.RegisterOpener(format.ModulePE, OpenModule)
}

// ErrImageMismatch says a file at a PE module's path is another build
// than the one recorded (its TimeDateStamp or SizeOfImage differ).
var ErrImageMismatch = errors.New("pesrc: image does not match the recorded code id")

// OpenModule opens a PE module of a trace. The image is looked for at its
// recorded path (after --path-map), then by its base name and code id in
// the debug directories (flat and in symbol-store layout, NAME/CODEID/NAME)
// and along _NT_SYMBOL_PATH, symbol servers included
// ([symsrv.LocateImage]), then in Options.TraceDir, and taken only when
// its code id (TimeDateStamp, SizeOfImage) is the recorded one. A path
// recorded under Wine on its Z: drive (Z:\tmp\app.exe) is tried as the
// Unix path it is (/tmp/app.exe) too; its PDB is then found as [Open] finds
// it, with _NT_SYMBOL_PATH. Without the image, the PDB alone is found by
// the recorded RSDS identity (GUID, age, name) next to the recorded path,
// in the debug directories and along _NT_SYMBOL_PATH, symbol servers
// included, and names the module's addresses. symbolizer.Options.SymbolPath,
// if set, replaces _NT_SYMBOL_PATH; with Options.NoRecordedPaths nothing is
// opened at the recorded path or next to it, and the recorded PDB path
// contributes its base name only.
func OpenModule(m *symbolizer.Module, opts *symbolizer.Options) (*symbolizer.Opened, error) {
	var dirs []string
	po := &Options{SymbolPath: os.Getenv("_NT_SYMBOL_PATH")}
	recorded := m.Path
	byID := false
	if opts != nil {
		dirs = opts.DebugDirs
		recorded = opts.MapPath(m.Path)
		if opts.SymbolPath != "" {
			po.SymbolPath = opts.SymbolPath
		}
		po.CacheDir = opts.SymbolCache
		byID = opts.NoRecordedPaths
		if opts.TraceDir != "" {
			dirs = append(dirs[:len(dirs):len(dirs)], opts.TraceDir)
		}
	}
	po.DebugDirs = dirs
	if byID {
		recorded = ""
	}
	var notes []string
	codeID := ""
	if m.TimeDateStamp != 0 || m.SizeOfImage != 0 {
		codeID = fmt.Sprintf("%08X%x", m.TimeDateStamp, m.SizeOfImage)
	}
	// matching opens the image at p if it is the recorded build.
	matching := func(p string) (*symbolizer.Opened, error) {
		img, err := pe.Open(p)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				notes = append(notes, fmt.Sprintf("%s: %v", p, err))
			}
			return nil, nil
		}
		ts, size := img.TimeDateStamp, img.SizeOfImage
		img.Close()
		if codeID != "" && (ts != m.TimeDateStamp || size != m.SizeOfImage) {
			notes = append(notes, fmt.Sprintf("%s: %v: %08X%x, recorded %s", p, ErrImageMismatch, ts, size, codeID))
			return nil, nil
		}
		src, err := Open(p, po)
		if err != nil {
			return nil, err
		}
		return &symbolizer.Opened{Source: src, Path: p}, nil
	}
	for _, p := range imageCandidates(recorded) {
		if o, err := matching(p); o != nil || err != nil {
			return o, err
		}
	}
	if codeID != "" && winBase(m.Path) != "" {
		// Debug dirs (flat and symbol-store layout) and symbol servers,
		// by name and code id.
		p, err := symsrv.LocateImage(context.Background(), winBase(m.Path), codeID, &symsrv.Options{DebugDirs: dirs, SymbolPath: po.SymbolPath, CacheDir: po.CacheDir})
		if err == nil {
			if o, err := matching(p); o != nil || err != nil {
				return o, err
			}
		} else {
			notes = append(notes, err.Error())
		}
	}
	if m.HasPDB() {
		cv := &pe.CodeView{GUID: pe.GUID(m.PDBGUID), Age: m.PDBAge, Path: m.PDBPath}
		if cv.Path == "" {
			cv.Path = strings.TrimSuffix(winBase(m.Path), filepathExt(winBase(m.Path))) + ".pdb"
		}
		if byID {
			cv.Path = winBase(cv.Path) // the name only: no recorded directory
		}
		where := ""
		if recorded != "" {
			where = recorded
			if u := wineUnixPath(recorded); u != "" {
				if _, err := os.Stat(filepath.Dir(u)); err == nil {
					where = u // the PDB next to the image Wine ran
				}
			}
		}
		p, err := symsrv.Locate(context.Background(), where, cv, &symsrv.Options{DebugDirs: dirs, SymbolPath: po.SymbolPath, CacheDir: po.CacheDir, NoRecordedPath: byID})
		if err == nil {
			f, err := pdb.Open(p)
			if err != nil {
				return nil, err
			}
			return &symbolizer.Opened{Source: f, Path: p}, nil
		}
		notes = append(notes, err.Error())
	}
	return nil, fmt.Errorf("pesrc: module %s: no matching image or PDB found (%s)", m.Path, strings.Join(notes, "; "))
}

// imageCandidates lists where a module's image may be besides the
// symbol stores: the mapped path, with Windows separators turned into
// slashes too (for a path map that rewrote only the drive part).
func imageCandidates(mapped string) []string {
	if mapped == "" {
		return nil
	}
	out := []string{mapped}
	if s := strings.ReplaceAll(mapped, `\`, "/"); s != mapped {
		out = append(out, s)
	}
	if u := wineUnixPath(mapped); u != "" {
		out = append(out, u)
	}
	return out
}

// wineUnixPath returns the Unix path of a path on Wine's Z: drive, which
// Wine maps to the root of the Unix file system ("Z:\tmp\a.exe" is
// "/tmp/a.exe"), or "" for any other path. The candidate is only taken
// when its code id is the recorded one, so a real Z: drive of a Windows
// host costs a failed open.
func wineUnixPath(p string) string {
	if len(p) < 3 || (p[0] != 'Z' && p[0] != 'z') || p[1] != ':' || (p[2] != '\\' && p[2] != '/') {
		return ""
	}
	return strings.ReplaceAll(p[2:], `\`, "/")
}

// winBase is the last element of a path with / or \ separators.
func winBase(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}

func filepathExt(p string) string {
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[i:]
	}
	return ""
}
