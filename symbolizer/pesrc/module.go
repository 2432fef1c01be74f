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
// recorded path (after --path-map) and by its base name in the debug
// directories, and taken only when its code id (TimeDateStamp,
// SizeOfImage) is the recorded one; its PDB is then found as [Open] finds
// it, with _NT_SYMBOL_PATH. Without the image, the PDB alone is found by
// the recorded RSDS identity (GUID, age, name) next to the recorded path,
// in the debug directories and along _NT_SYMBOL_PATH, symbol servers
// included, and names the module's addresses.
func OpenModule(m *symbolizer.Module, opts *symbolizer.Options) (*symbolizer.Opened, error) {
	var dirs []string
	if opts != nil {
		dirs = opts.DebugDirs
	}
	po := &Options{DebugDirs: dirs, SymbolPath: os.Getenv("_NT_SYMBOL_PATH")}
	recorded := m.Path
	if opts != nil {
		recorded = opts.MapPath(m.Path)
	}
	var notes []string
	for _, p := range imageCandidates(recorded, m.Path, dirs) {
		img, err := pe.Open(p)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				notes = append(notes, fmt.Sprintf("%s: %v", p, err))
			}
			continue
		}
		ts, size := img.TimeDateStamp, img.SizeOfImage
		img.Close()
		if (m.TimeDateStamp != 0 || m.SizeOfImage != 0) && (ts != m.TimeDateStamp || size != m.SizeOfImage) {
			notes = append(notes, fmt.Sprintf("%s: %v: %08X%x, recorded %08X%x", p, ErrImageMismatch, ts, size, m.TimeDateStamp, m.SizeOfImage))
			continue
		}
		src, err := Open(p, po)
		if err != nil {
			return nil, err
		}
		return &symbolizer.Opened{Source: src, Path: p}, nil
	}
	if m.HasPDB() {
		cv := &pe.CodeView{GUID: pe.GUID(m.PDBGUID), Age: m.PDBAge, Path: m.PDBPath}
		if cv.Path == "" {
			cv.Path = strings.TrimSuffix(winBase(m.Path), filepathExt(winBase(m.Path))) + ".pdb"
		}
		where := ""
		if recorded != "" {
			where = recorded
		}
		p, err := symsrv.Locate(context.Background(), where, cv, &symsrv.Options{DebugDirs: dirs, SymbolPath: po.SymbolPath})
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

// imageCandidates lists where a module's image may be: the mapped path,
// and its base name (Windows separators understood) in each debug dir.
func imageCandidates(mapped, recorded string, dirs []string) []string {
	var out []string
	if mapped != "" {
		out = append(out, mapped)
	}
	if b := winBase(recorded); b != "" {
		for _, d := range dirs {
			out = append(out, filepath.Join(d, b))
		}
	}
	return out
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
