package cpython

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// Load reads the interpreter in the ELF file at file, which the target
// names path (for errors and the version its name gives): its symbols,
// layout and segments, and the take_gil functions, from the file or, when
// it is stripped, from the debug file its build id names. It returns an
// error wrapping ErrUnknownVersion for a CPython rawstack does not read,
// and errNotPython for a file with no interpreter.
func Load(file, path string) (*Interp, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, fmt.Errorf("cpython: %w", err)
	}
	defer f.Close()
	in, err := Find(f, path)
	if err != nil {
		return nil, err
	}
	in.progs = loadSegments(f)
	if !in.KnowsTakeGIL() { // a stripped interpreter (Debian's): its debug file, by build id
		if d := buildIDDebugFile(f); d != "" {
			if df, err := elf.Open(d); err == nil {
				syms, _ := df.Symbols()
				in.addTakeGIL(syms)
				df.Close()
			}
		}
	}
	return in, nil
}

// buildIDDebugFile returns the path of f's separate debug file by its
// build id (/usr/lib/debug/.build-id/xx/yyyy.debug, where Debian's -dbg
// and -dbgsym packages put them), "" without a build id.
func buildIDDebugFile(f *elf.File) string {
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		return ""
	}
	b, err := s.Data()
	if err != nil || len(b) < 16 {
		return ""
	}
	namesz, descsz := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
	start := 12 + (uint64(namesz)+3)&^3
	if descsz < 2 || descsz > 64 || start+uint64(descsz) > uint64(len(b)) {
		return ""
	}
	id := hex.EncodeToString(b[start : start+uint64(descsz)])
	return "/usr/lib/debug/.build-id/" + id[:2] + "/" + id[2:] + ".debug"
}

// IsNotPython reports whether err says a file holds no interpreter (as
// opposed to one rawstack cannot read).
func IsNotPython(err error) bool { return err == errNotPython }
