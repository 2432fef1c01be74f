// Package pdb reads Microsoft PDB 7 files (MSF 7.00 containers) well enough
// to symbolize: the PDB info stream (GUID and age, to match an image's
// CodeView record), the /names string table, the DBI stream (modules,
// section contributions, section headers, OMAP), module symbol streams
// (procedures and inline sites with their binary annotations), C13 line
// tables, inlinee lines, publics and the IPI/TPI records that name inlined
// functions.
//
// Streams are read when first needed and every size read from the file is
// checked against the file before anything is allocated for it.
//
//	f, err := pdb.Open("prog.pdb")
//	if err != nil { ... }
//	defer f.Close()
//	frames, err := f.Symbolize(0x1234, nil) // RVA, innermost inlined frame first
package pdb

import (
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"github.com/rawstack/rawstack/symbolizer"
)

// Fixed stream numbers.
const (
	streamPDB = 1
	streamTPI = 2
	streamDBI = 3
	streamIPI = 4
)

// GUID is a PDB signature GUID in its on-disk (little-endian fields) form.
type GUID [16]byte

// String formats g the way symbol servers and symstore do: the three
// leading fields as little-endian numbers, then the remaining 8 bytes, all
// upper-case hex, no dashes.
func (g GUID) String() string {
	return fmt.Sprintf("%08X%04X%04X%X", le32(g[0:]), le16(g[4:]), le16(g[6:]), g[8:16])
}

// SectionHeader is one image section as the DBI stream records it.
type SectionHeader struct {
	Name           string
	VirtualSize    uint32
	VirtualAddress uint32
}

// Module is one compiland (object file) of the DBI stream.
type Module struct {
	Name      string // module (object) name
	ObjName   string // object or library file name
	SymStream int    // module stream number; -1 if none
	SymBytes  uint32 // CodeView symbols size (including the 4-byte signature)
	C11Bytes  uint32
	C13Bytes  uint32
}

// SectionContrib says which module contributed a range of a section.
type SectionContrib struct {
	Section uint16 // 1-based
	Offset  uint32
	Size    uint32
	Module  uint16
}

// File is an open PDB file.
type File struct {
	msf    *msf
	name   string
	closer io.Closer

	// PDB info stream.
	Version   uint32
	Signature uint32
	Age       uint32 // from the PDB info stream
	GUID      GUID

	// DBI stream.
	DBIAge   uint32
	Machine  uint16
	Modules  []Module
	Contribs []SectionContrib // sorted by (Section, Offset)
	Sections []SectionHeader  // sections the symbols' addresses refer to

	namesStream   int
	publicsStream int
	symRecStream  int
	omapToSrc     []omapEntry // image RVA → RVA of the symbols' address space
	rvaContribs   []rvaRange  // module ranges by RVA

	mu      sync.Mutex
	names   []byte // /names string bytes
	namesOK bool
	mods    []*modInfo // parsed module streams, lazily
	publics *publics
	tpi     *typeStream
	ipi     *typeStream

	demangleCache sync.Map // linkage name → demangled name
	inlineeCache  sync.Map // inlinee id → qualified name
}

type omapEntry struct{ from, to uint32 }

type rvaRange struct {
	start, end uint32 // [start, end)
	mod        uint16
}

// Open opens the PDB file at path.
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
	p, err := newFile(f, path, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	p.closer = f
	return p, nil
}

// NewFile reads a PDB of the given size from r; name is used in errors.
func NewFile(r io.ReaderAt, name string, size int64) (*File, error) {
	return newFile(r, name, size)
}

// Close closes the file Open opened.
func (f *File) Close() error {
	if f.closer != nil {
		return f.closer.Close()
	}
	return nil
}

func newFile(r io.ReaderAt, name string, size int64) (*File, error) {
	m, err := openMSF(r, name, size)
	if err != nil {
		return nil, err
	}
	f := &File{msf: m, name: name, namesStream: -1, publicsStream: -1, symRecStream: -1}
	if err := f.readInfo(); err != nil {
		return nil, err
	}
	if err := f.readDBI(); err != nil {
		return nil, err
	}
	f.mods = make([]*modInfo, len(f.Modules))
	return f, nil
}

func (f *File) readInfo() error {
	b, err := f.msf.stream(streamPDB)
	if err != nil {
		return err
	}
	r := newReader(b, f.name, streamPDB)
	f.Version = r.u32()
	f.Signature = r.u32()
	f.Age = r.u32()
	copy(f.GUID[:], r.bytes(16))
	// Named stream map: string buffer, then a hash table of
	// (string offset, stream number).
	strLen := r.u32()
	strs := r.bytes(int(min(strLen, uint32(r.remaining()+1))))
	nPresent := r.u32()
	capacity := r.u32()
	if capacity > uint32(r.remaining()) {
		r.errorf("named stream map capacity %d too large", capacity)
	}
	presentWords := r.u32()
	if presentWords > uint32(r.remaining()/4) {
		r.errorf("named stream map bit vector of %d words too large", presentWords)
	}
	r.skip(int(presentWords) * 4)
	deletedWords := r.u32()
	if deletedWords > uint32(r.remaining()/4) {
		r.errorf("named stream map bit vector of %d words too large", deletedWords)
	}
	r.skip(int(deletedWords) * 4)
	if nPresent > uint32(r.remaining()/8) {
		r.errorf("named stream map: %d entries do not fit", nPresent)
	}
	for i := uint32(0); i < nPresent && r.err == nil; i++ {
		off := r.u32()
		stream := r.u32()
		if off < uint32(len(strs)) && cstr(strs[off:]) == "/names" {
			f.namesStream = int(stream)
		}
	}
	return r.err
}

func (f *File) readDBI() error {
	b, err := f.msf.stream(streamDBI)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return nil // a PDB without a DBI stream has no symbols
	}
	r := newReader(b, f.name, streamDBI)
	sig := int32(r.u32())
	if sig != -1 {
		r.errorf("DBI signature %d is not -1 (old DBI format)", sig)
		return r.err
	}
	r.u32() // version
	f.DBIAge = r.u32()
	r.u16() // global stream
	r.u16() // build number
	f.publicsStream = int(r.u16())
	r.u16() // pdb dll version
	f.symRecStream = int(r.u16())
	r.u16() // rbld
	modInfoSize := r.u32()
	secContrSize := r.u32()
	secMapSize := r.u32()
	srcInfoSize := r.u32()
	tsMapSize := r.u32()
	r.u32() // MFC type server index
	dbgHdrSize := r.u32()
	ecSize := r.u32()
	r.u16() // flags
	f.Machine = r.u16()
	r.u32()
	if r.err != nil {
		return r.err
	}
	// sub returns a reader over the next substream of n bytes. Offsets in
	// its errors are relative to the substream.
	sub := func(n uint32) *reader {
		p := r.bytes(int(min(n, uint32(len(b)+1))))
		return newReader(p, f.name, streamDBI)
	}
	mi := sub(modInfoSize)
	sc := sub(secContrSize)
	sub(secMapSize)
	sub(srcInfoSize)
	sub(tsMapSize)
	sub(ecSize)
	dh := sub(dbgHdrSize)
	if r.err != nil {
		return r.err
	}

	for mi.remaining() >= 64 && mi.err == nil {
		mi.u32()
		mi.skip(28) // section contribution of the module
		mi.u16()    // flags
		stream := mi.u16()
		var m Module
		m.SymStream = int(stream)
		if stream == 0xFFFF {
			m.SymStream = -1
		}
		m.SymBytes = mi.u32()
		m.C11Bytes = mi.u32()
		m.C13Bytes = mi.u32()
		mi.u16() // source file count
		mi.u16()
		mi.u32()
		mi.u32() // source file name index
		mi.u32() // pdb file path name index
		m.Name = mi.cstring()
		m.ObjName = mi.cstring()
		mi.align(4)
		f.Modules = append(f.Modules, m)
	}
	if mi.err != nil {
		return mi.err
	}

	if sc.remaining() >= 4 {
		ver := sc.u32()
		entSize := 28
		if ver == 0xeffe0000+20140516 {
			entSize = 32
		}
		n := sc.remaining() / entSize
		f.Contribs = make([]SectionContrib, 0, n)
		for i := 0; i < n; i++ {
			e := sc.bytes(entSize)
			c := SectionContrib{Section: le16(e[0:]), Offset: le32(e[4:]), Size: le32(e[8:]), Module: le16(e[16:])}
			f.Contribs = append(f.Contribs, c)
		}
	}

	// Optional debug header: stream numbers of FPO, exception, fixup,
	// OMAP to source, OMAP from source, section headers, token map, xdata,
	// pdata, new FPO, original section headers.
	var dbg [11]int
	for i := range dbg {
		dbg[i] = -1
		if dh.remaining() >= 2 {
			if v := dh.u16(); v != 0xFFFF {
				dbg[i] = int(v)
			}
		}
	}
	secStream := dbg[5]
	if dbg[3] >= 0 && dbg[10] >= 0 {
		// With OMAP the symbols use the original (pre-optimisation)
		// sections, and image RVAs go through the OMAP-to-source table.
		secStream = dbg[10]
		om, err := f.msf.stream(dbg[3])
		if err != nil {
			return err
		}
		f.omapToSrc = make([]omapEntry, len(om)/8)
		for i := range f.omapToSrc {
			f.omapToSrc[i] = omapEntry{le32(om[i*8:]), le32(om[i*8+4:])}
		}
	}
	if secStream >= 0 {
		sh, err := f.msf.stream(secStream)
		if err != nil {
			return err
		}
		for i := 0; i+40 <= len(sh); i += 40 {
			f.Sections = append(f.Sections, SectionHeader{
				Name:           cstr(sh[i : i+8]),
				VirtualSize:    le32(sh[i+8:]),
				VirtualAddress: le32(sh[i+12:]),
			})
		}
	}

	// Module ranges by RVA. Contributions should not overlap; where they
	// do, the first one wins.
	for _, c := range f.Contribs {
		if c.Size == 0 || int(c.Module) >= len(f.Modules) {
			continue
		}
		rva, ok := f.sectRVA(c.Section, c.Offset)
		if !ok || uint64(rva)+uint64(c.Size) > 1<<32 {
			continue
		}
		f.rvaContribs = append(f.rvaContribs, rvaRange{rva, rva + c.Size, c.Module})
	}
	sort.SliceStable(f.rvaContribs, func(i, j int) bool { return f.rvaContribs[i].start < f.rvaContribs[j].start })
	out := f.rvaContribs[:0]
	for _, c := range f.rvaContribs {
		if len(out) > 0 && c.start < out[len(out)-1].end {
			continue
		}
		out = append(out, c)
	}
	f.rvaContribs = out
	return nil
}

// sectRVA converts a section:offset address (1-based section) to an RVA in
// the symbols' address space.
func (f *File) sectRVA(sect uint16, off uint32) (uint32, bool) {
	if sect == 0 || int(sect) > len(f.Sections) {
		return 0, false
	}
	return f.Sections[sect-1].VirtualAddress + off, true
}

// imageToSymRVA maps an image RVA to the symbols' address space through
// OMAP when the PDB has it.
func (f *File) imageToSymRVA(rva uint32) (uint32, bool) {
	if f.omapToSrc == nil {
		return rva, true
	}
	t := f.omapToSrc
	i := sort.Search(len(t), func(i int) bool { return t[i].from > rva }) - 1
	if i < 0 || t[i].to == 0 {
		return 0, false
	}
	return t[i].to + (rva - t[i].from), true
}

// moduleAt returns the index of the module that contributed the byte at
// rva (in the symbols' address space).
func (f *File) moduleAt(rva uint32) (int, bool) {
	t := f.rvaContribs
	i := sort.Search(len(t), func(i int) bool { return t[i].start > rva }) - 1
	if i < 0 || rva >= t[i].end {
		return 0, false
	}
	return int(t[i].mod), true
}

// namesTable returns the bytes of the /names string table.
func (f *File) namesTable() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.namesOK {
		return f.names, nil
	}
	f.namesOK = true
	if f.namesStream < 0 {
		return nil, nil
	}
	b, err := f.msf.stream(f.namesStream)
	if err != nil {
		return nil, err
	}
	r := newReader(b, f.name, f.namesStream)
	if sig := r.u32(); sig != 0xEFFEEFFE {
		r.errorf("/names signature %#x", sig)
	}
	r.u32() // hash version
	n := r.u32()
	f.names = r.bytes(int(min(n, uint32(r.remaining()+1))))
	return f.names, r.err
}

// Name returns the string at offset off of the /names table.
func (f *File) Name(off uint32) (string, error) {
	t, err := f.namesTable()
	if err != nil {
		return "", err
	}
	if off >= uint32(len(t)) {
		return "", &FormatError{File: f.name, Stream: f.namesStream, Offset: int64(off) + 12, Msg: "/names offset out of range"}
	}
	return cstr(t[off:]), nil
}

var _ symbolizer.Source = (*File)(nil)
