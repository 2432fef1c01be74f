// Package pe reads the parts of a PE image that debug/pe does not: the
// CodeView (RSDS) record of the debug directory that names the image's
// PDB, the symbol-server ids, the export table and the exception
// directory (.pdata) the Windows unwinder reads.
//
//	f, err := pe.Open("prog.exe")
//	if err != nil { ... }
//	defer f.Close()
//	cv, err := f.CodeView()      // PDB path, GUID and age
//	fmt.Println(cv.DebugID())    // "GUIDAGE", as symbol servers index it
//	fmt.Println(f.CodeID())      // TimeDateStamp+SizeOfImage
package pe

import (
	"debug/pe"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// FormatError reports malformed PE data at a file offset.
type FormatError struct {
	File   string
	Offset int64
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("pe: %s: offset %#x: %s", e.File, e.Offset, e.Msg)
}

// ErrNoCodeView says the image has no CodeView RSDS debug record.
var ErrNoCodeView = errors.New("pe: no CodeView (RSDS) debug record")

// Caps on what is read from the file.
const (
	maxExports     = 1 << 20
	maxDebugDirs   = 64
	maxNameLen     = 4096
	maxSectionRead = 1 << 30
)

// File is an open PE image.
type File struct {
	PE            *pe.File
	Name          string
	Machine       uint16
	TimeDateStamp uint32
	ImageBase     uint64
	SizeOfImage   uint32
	dirs          []pe.DataDirectory
	r             io.ReaderAt
	size          int64
	closer        io.Closer
}

// Open opens the PE image at path.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	p, err := NewFile(f, path, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	p.closer = f
	return p, nil
}

// NewFile reads a PE image of the given size from r; name is used in
// errors.
func NewFile(r io.ReaderAt, name string, size int64) (*File, error) {
	pf, err := pe.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("pe: %s: %w", name, err)
	}
	f := &File{PE: pf, Name: name, Machine: pf.Machine, TimeDateStamp: pf.TimeDateStamp, r: r, size: size}
	switch oh := pf.OptionalHeader.(type) {
	case *pe.OptionalHeader64:
		f.ImageBase, f.SizeOfImage = oh.ImageBase, oh.SizeOfImage
		f.dirs = oh.DataDirectory[:min(int(oh.NumberOfRvaAndSizes), len(oh.DataDirectory))]
	case *pe.OptionalHeader32:
		f.ImageBase, f.SizeOfImage = uint64(oh.ImageBase), oh.SizeOfImage
		f.dirs = oh.DataDirectory[:min(int(oh.NumberOfRvaAndSizes), len(oh.DataDirectory))]
	default:
		return nil, &FormatError{File: name, Msg: "no optional header (an object file, not an image)"}
	}
	return f, nil
}

// Close closes the file Open opened.
func (f *File) Close() error {
	if f.closer != nil {
		return f.closer.Close()
	}
	return nil
}

// CodeID is the id symbol servers index images by: TimeDateStamp as
// eight upper-case hex digits followed by SizeOfImage in lower-case hex.
func (f *File) CodeID() string {
	return fmt.Sprintf("%08X%x", f.TimeDateStamp, f.SizeOfImage)
}

// ReadRVA fills p with the image bytes at rva, as the loader maps them:
// bytes past a section's raw data read as zeros. It fails when the range is
// not inside one section.
func (f *File) ReadRVA(rva uint32, p []byte) error {
	for _, s := range f.PE.Sections {
		vsize := max(s.VirtualSize, s.Size)
		if rva < s.VirtualAddress || rva-s.VirtualAddress >= vsize {
			continue
		}
		off := rva - s.VirtualAddress
		if uint64(off)+uint64(len(p)) > uint64(vsize) {
			return &FormatError{File: f.Name, Offset: int64(s.Offset) + int64(off), Msg: fmt.Sprintf("rva %#x+%d crosses the end of section %s", rva, len(p), s.Name)}
		}
		clear(p)
		if off < s.Size {
			n := min(uint32(len(p)), s.Size-off)
			if _, err := f.r.ReadAt(p[:n], int64(s.Offset)+int64(off)); err != nil {
				return &FormatError{File: f.Name, Offset: int64(s.Offset) + int64(off), Msg: fmt.Sprintf("reading rva %#x: %v", rva, err)}
			}
		}
		return nil
	}
	return &FormatError{File: f.Name, Msg: fmt.Sprintf("rva %#x is in no section", rva)}
}

// dir returns the bytes of data directory i, nil if absent.
func (f *File) dir(i int) ([]byte, uint32, error) {
	if i >= len(f.dirs) || f.dirs[i].Size == 0 {
		return nil, 0, nil
	}
	d := f.dirs[i]
	if int64(d.Size) > f.size || d.Size > maxSectionRead {
		return nil, 0, &FormatError{File: f.Name, Msg: fmt.Sprintf("data directory %d of %d bytes exceeds the file", i, d.Size)}
	}
	p := make([]byte, d.Size)
	if err := f.ReadRVA(d.VirtualAddress, p); err != nil {
		return nil, 0, err
	}
	return p, d.VirtualAddress, nil
}

// GUID is a PDB signature in its on-disk form.
type GUID [16]byte

// String formats g as symbol servers do: the first three fields as
// little-endian numbers, then the last eight bytes, upper-case hex.
func (g GUID) String() string {
	le := binary.LittleEndian
	return fmt.Sprintf("%08X%04X%04X%X", le.Uint32(g[0:]), le.Uint16(g[4:]), le.Uint16(g[6:]), g[8:16])
}

// CodeView is the RSDS record: the PDB an image was linked with.
type CodeView struct {
	GUID GUID
	Age  uint32
	Path string // PDB path as the linker wrote it
}

// DebugID is the symbol-server key of the PDB: GUID then age in hex.
func (c *CodeView) DebugID() string { return fmt.Sprintf("%s%X", c.GUID, c.Age) }

// PDBName is the base name of the PDB path, for either path separator.
func (c *CodeView) PDBName() string {
	p := c.Path
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		p = p[i+1:]
	}
	return p
}

// CodeView returns the image's RSDS record, or ErrNoCodeView.
func (f *File) CodeView() (*CodeView, error) {
	b, _, err := f.dir(pe.IMAGE_DIRECTORY_ENTRY_DEBUG)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	for i := 0; i+28 <= len(b) && i/28 < maxDebugDirs; i += 28 {
		typ := le.Uint32(b[i+12:])
		size := le.Uint32(b[i+16:])
		ptr := le.Uint32(b[i+24:])
		if typ != 2 { // IMAGE_DEBUG_TYPE_CODEVIEW
			continue
		}
		if size < 24 || size > maxNameLen+24 || int64(ptr)+int64(size) > f.size {
			return nil, &FormatError{File: f.Name, Offset: int64(ptr), Msg: fmt.Sprintf("bad CodeView record size %d", size)}
		}
		rec := make([]byte, size)
		if _, err := f.r.ReadAt(rec, int64(ptr)); err != nil {
			return nil, &FormatError{File: f.Name, Offset: int64(ptr), Msg: fmt.Sprintf("reading CodeView record: %v", err)}
		}
		if string(rec[:4]) != "RSDS" {
			continue // NB10 (PDB 2.0) and others are not supported
		}
		cv := &CodeView{Age: le.Uint32(rec[20:])}
		copy(cv.GUID[:], rec[4:20])
		name := rec[24:]
		for j, c := range name {
			if c == 0 {
				name = name[:j]
				break
			}
		}
		cv.Path = string(name)
		return cv, nil
	}
	return nil, fmt.Errorf("%w in %s", ErrNoCodeView, f.Name)
}

// Export is one entry of the export table.
type Export struct {
	Name      string // "" for an export by ordinal only
	Ordinal   uint32 // biased by the table's ordinal base
	RVA       uint32
	Forwarder string // "DLL.Func" when the export forwards elsewhere
}

// Exports returns the image's export table.
func (f *File) Exports() ([]Export, error) {
	b, base, err := f.dir(pe.IMAGE_DIRECTORY_ENTRY_EXPORT)
	if err != nil || b == nil {
		return nil, err
	}
	if len(b) < 40 {
		return nil, &FormatError{File: f.Name, Msg: "short export directory"}
	}
	le := binary.LittleEndian
	ordBase := le.Uint32(b[16:])
	nFuncs := le.Uint32(b[20:])
	nNames := le.Uint32(b[24:])
	funcsRVA := le.Uint32(b[28:])
	namesRVA := le.Uint32(b[32:])
	ordsRVA := le.Uint32(b[36:])
	if nFuncs > maxExports || nNames > nFuncs {
		return nil, &FormatError{File: f.Name, Msg: fmt.Sprintf("export table with %d functions, %d names", nFuncs, nNames)}
	}
	funcs := make([]byte, 4*nFuncs)
	names := make([]byte, 4*nNames)
	ords := make([]byte, 2*nNames)
	for _, x := range []struct {
		rva uint32
		p   []byte
	}{{funcsRVA, funcs}, {namesRVA, names}, {ordsRVA, ords}} {
		if len(x.p) > 0 {
			if err := f.ReadRVA(x.rva, x.p); err != nil {
				return nil, err
			}
		}
	}
	exps := make([]Export, nFuncs)
	for i := range exps {
		exps[i].Ordinal = ordBase + uint32(i)
		exps[i].RVA = le.Uint32(funcs[4*i:])
		if r := exps[i].RVA; r >= base && r-base < uint32(len(b)) {
			exps[i].Forwarder = cstring(b[r-base:])
		}
	}
	for i := uint32(0); i < nNames; i++ {
		idx := le.Uint16(ords[2*i:])
		if uint32(idx) >= nFuncs {
			continue
		}
		name, err := f.stringAt(le.Uint32(names[4*i:]))
		if err != nil {
			return nil, err
		}
		exps[idx].Name = name
	}
	return exps, nil
}

func (f *File) stringAt(rva uint32) (string, error) {
	var buf [256]byte
	var out []byte
	for len(out) < maxNameLen {
		n := len(buf)
		// Do not read across the end of the section.
		for n > 1 {
			if err := f.ReadRVA(rva, buf[:n]); err == nil {
				break
			}
			n /= 2
		}
		if err := f.ReadRVA(rva, buf[:n]); err != nil {
			return "", err
		}
		for i := 0; i < n; i++ {
			if buf[i] == 0 {
				return string(append(out, buf[:i]...)), nil
			}
		}
		out = append(out, buf[:n]...)
		rva += uint32(n)
	}
	return "", &FormatError{File: f.Name, Msg: fmt.Sprintf("string at rva %#x longer than %d bytes", rva, maxNameLen)}
}

func cstring(p []byte) string {
	for i, c := range p {
		if c == 0 {
			return string(p[:i])
		}
	}
	return string(p)
}

// ExceptionData returns the exception directory: the .pdata function
// table (RUNTIME_FUNCTION entries, 12 bytes each on x64, 8 on arm64).
func (f *File) ExceptionData() ([]byte, error) {
	b, _, err := f.dir(pe.IMAGE_DIRECTORY_ENTRY_EXCEPTION)
	return b, err
}
