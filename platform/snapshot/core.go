package snapshot

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/internal/elfnote"
)

// Caps on what a core file may make the reader allocate or walk.
const (
	maxCoreSegments = 1 << 20  // program headers
	maxCoreNotes    = 64 << 20 // bytes of one PT_NOTE segment
	maxCoreThreads  = 1 << 16  // NT_PRSTATUS notes
	maxCoreFiles    = 1 << 20  // NT_FILE entries
	maxAuxv         = 1 << 12  // auxv entries
)

// Note types of a Linux core (name "CORE").
const (
	ntPRSTATUS = 1
	ntPRPSINFO = 3
	ntAUXV     = 6
	ntFILE     = 0x46494c45
)

// Auxiliary vector keys the reader uses.
const (
	atPHDR        = 3
	atENTRY       = 9
	atSysinfoEHDR = 33
)

// Offsets in struct elf_prstatus (the same on amd64 and arm64).
const (
	prstatusCursig = 12
	prstatusPid    = 32
	prstatusRegs   = 112
)

// Offsets in struct elf_prpsinfo (amd64 and arm64).
const (
	prpsinfoPid   = 24
	prpsinfoFname = 40
	prpsinfoArgs  = 56
	prpsinfoSize  = 136
)

// CoreError says where in a core file decoding failed.
type CoreError struct {
	File string
	Off  int64
	Msg  string
}

func (e *CoreError) Error() string {
	return fmt.Sprintf("snapshot: core %s: offset %#x: %s", e.File, e.Off, e.Msg)
}

// CoreFile is a parsed ELF core dump of a 64-bit little-endian Linux
// process (amd64 or arm64): its threads, memory segments, mapped files and
// auxiliary vector. It reads memory lazily through the io.ReaderAt.
type CoreFile struct {
	Name     string
	Arch     arch.Arch
	Pid      int
	Comm     string // NT_PRPSINFO pr_fname
	Args     string // NT_PRPSINFO pr_psargs
	Threads  []CoreThread
	Segments []CoreSegment // PT_LOAD, sorted by Vaddr
	Files    []CoreMapping // NT_FILE, in the note's order
	Auxv     []AuxvEntry

	r      io.ReaderAt
	size   int64
	closer io.Closer
}

// CoreThread is one NT_PRSTATUS note.
type CoreThread struct {
	Tid    int
	Signal int // pr_cursig: the signal that killed the process, on its thread
	Regs   arch.Regs
}

// CoreSegment is one PT_LOAD segment. Bytes [Vaddr, Vaddr+Filesz) are in
// the core at Off; the rest up to Memsz were not dumped.
type CoreSegment struct {
	Vaddr, Memsz, Off, Filesz uint64
	Flags                     elf.ProgFlag
}

// CoreMapping is one NT_FILE entry: [Start, End) maps Path from Offset.
type CoreMapping struct {
	Start, End, Offset uint64
	Path               string
}

// AuxvEntry is one auxiliary vector pair.
type AuxvEntry struct{ Key, Val uint64 }

// OpenCore opens and parses the core file at path.
func OpenCore(path string) (*CoreFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	c, err := NewCore(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	c.closer = f
	return c, nil
}

// Close closes the file OpenCore opened.
func (c *CoreFile) Close() error {
	if c.closer == nil {
		return nil
	}
	return c.closer.Close()
}

// NewCore parses a core file of size bytes read through r; name is used
// in errors.
func NewCore(r io.ReaderAt, size int64, name string) (*CoreFile, error) {
	c := &CoreFile{Name: name, r: r, size: size}
	fail := func(off int64, format string, args ...any) error {
		return &CoreError{File: name, Off: off, Msg: fmt.Sprintf(format, args...)}
	}
	var eh [64]byte
	if _, err := r.ReadAt(eh[:], 0); err != nil {
		return nil, fail(0, "reading the ELF header: %v", err)
	}
	if string(eh[:4]) != "\x7fELF" {
		return nil, fail(0, "not an ELF file")
	}
	if eh[4] != 2 || eh[5] != 1 {
		return nil, fail(4, "class %d data %d: only 64-bit little-endian cores are supported", eh[4], eh[5])
	}
	le := binary.LittleEndian
	if t := le.Uint16(eh[16:]); t != uint16(elf.ET_CORE) {
		return nil, fail(16, "ELF type %d, not a core file", t)
	}
	switch m := elf.Machine(le.Uint16(eh[18:])); m {
	case elf.EM_X86_64:
		c.Arch = arch.AMD64
	case elf.EM_AARCH64:
		c.Arch = arch.ARM64
	default:
		return nil, fail(18, "unsupported machine %v", m)
	}
	phoff, shoff := le.Uint64(eh[32:]), le.Uint64(eh[40:])
	phentsize, phnum := uint64(le.Uint16(eh[54:])), uint64(le.Uint16(eh[56:]))
	if phnum == 0xffff { // PN_XNUM: the count is section header 0's sh_info
		var sh [64]byte
		if shoff > uint64(size) {
			return nil, fail(40, "section header offset %#x past the end", shoff)
		}
		if _, err := r.ReadAt(sh[:], int64(shoff)); err != nil {
			return nil, fail(int64(shoff), "reading section header 0: %v", err)
		}
		phnum = uint64(le.Uint32(sh[44:]))
	}
	if phentsize < 56 {
		return nil, fail(54, "program header size %d, want at least 56", phentsize)
	}
	if phnum > maxCoreSegments || phoff > uint64(size) || phnum*phentsize > uint64(size)-phoff {
		return nil, fail(32, "%d program headers of %d bytes at %#x do not fit in the %d-byte file", phnum, phentsize, phoff, size)
	}
	ph := make([]byte, phnum*phentsize)
	if _, err := r.ReadAt(ph, int64(phoff)); err != nil {
		return nil, fail(int64(phoff), "reading program headers: %v", err)
	}
	for i := uint64(0); i < phnum; i++ {
		p := ph[i*phentsize:]
		hoff := int64(phoff + i*phentsize)
		typ, flags := elf.ProgType(le.Uint32(p)), elf.ProgFlag(le.Uint32(p[4:]))
		off, vaddr, filesz, memsz, align := le.Uint64(p[8:]), le.Uint64(p[16:]), le.Uint64(p[32:]), le.Uint64(p[40:]), le.Uint64(p[48:])
		switch typ {
		case elf.PT_LOAD:
			// Data past the end of a truncated core is treated as not dumped.
			if off > uint64(size) {
				filesz = 0
			} else if filesz > uint64(size)-off {
				filesz = uint64(size) - off
			}
			if filesz > memsz {
				filesz = memsz
			}
			if vaddr+memsz < vaddr {
				return nil, fail(hoff, "segment at %#x of %#x bytes wraps around", vaddr, memsz)
			}
			c.Segments = append(c.Segments, CoreSegment{Vaddr: vaddr, Memsz: memsz, Off: off, Filesz: filesz, Flags: flags})
		case elf.PT_NOTE:
			if filesz > maxCoreNotes {
				return nil, fail(hoff, "note segment of %d bytes, over the %d cap", filesz, maxCoreNotes)
			}
			if off > uint64(size) || filesz > uint64(size)-off {
				return nil, fail(hoff, "note segment [%#x, +%#x) past the end of the %d-byte file", off, filesz, size)
			}
			notes := make([]byte, filesz)
			if _, err := r.ReadAt(notes, int64(off)); err != nil {
				return nil, fail(int64(off), "reading notes: %v", err)
			}
			if err := c.parseNotes(notes, int64(off), align); err != nil {
				return nil, err
			}
		}
	}
	sort.Slice(c.Segments, func(i, j int) bool { return c.Segments[i].Vaddr < c.Segments[j].Vaddr })
	if len(c.Threads) == 0 {
		return nil, fail(0, "no NT_PRSTATUS note: no threads")
	}
	return c, nil
}

func (c *CoreFile) parseNotes(b []byte, base int64, align uint64) error {
	le := binary.LittleEndian
	var err error
	fail := func(off int, format string, args ...any) bool {
		err = &CoreError{File: c.Name, Off: base + int64(off), Msg: fmt.Sprintf(format, args...)}
		return false
	}
	bad := elfnote.ForEach(b, le, align, func(name string, typ uint32, desc []byte, off int) bool {
		if name != "CORE" {
			return true
		}
		switch typ {
		case ntPRSTATUS:
			if len(c.Threads) >= maxCoreThreads {
				return fail(off, "more than %d threads", maxCoreThreads)
			}
			n := gregsAMD64
			if c.Arch == arch.ARM64 {
				n = gregsARM64
			}
			if len(desc) < prstatusRegs+n*8 {
				return fail(off, "NT_PRSTATUS of %d bytes, want at least %d", len(desc), prstatusRegs+n*8)
			}
			g := make([]uint64, n)
			for i := range g {
				g[i] = le.Uint64(desc[prstatusRegs+8*i:])
			}
			regs, rerr := regsFromGregs(c.Arch, g)
			if rerr != nil {
				return fail(off, "%v", rerr)
			}
			c.Threads = append(c.Threads, CoreThread{
				Tid:    int(int32(le.Uint32(desc[prstatusPid:]))),
				Signal: int(le.Uint16(desc[prstatusCursig:])),
				Regs:   regs,
			})
		case ntPRPSINFO:
			if len(desc) < prpsinfoSize {
				return fail(off, "NT_PRPSINFO of %d bytes, want %d", len(desc), prpsinfoSize)
			}
			c.Pid = int(int32(le.Uint32(desc[prpsinfoPid:])))
			c.Comm = cString(desc[prpsinfoFname:prpsinfoArgs])
			c.Args = strings.TrimSpace(cString(desc[prpsinfoArgs:prpsinfoSize]))
		case ntAUXV:
			for i := 0; i+16 <= len(desc) && len(c.Auxv) < maxAuxv; i += 16 {
				k, v := le.Uint64(desc[i:]), le.Uint64(desc[i+8:])
				if k == 0 {
					break
				}
				c.Auxv = append(c.Auxv, AuxvEntry{k, v})
			}
		case ntFILE:
			return c.parseFileNote(desc, off, fail)
		}
		return true
	})
	if err != nil {
		return err
	}
	if bad >= 0 {
		return &CoreError{File: c.Name, Off: base + int64(bad), Msg: "truncated or oversized note"}
	}
	return nil
}

// parseFileNote parses NT_FILE: count, page size, count (start, end,
// offset in pages) triples, then count NUL-terminated paths.
func (c *CoreFile) parseFileNote(desc []byte, off int, fail func(int, string, ...any) bool) bool {
	le := binary.LittleEndian
	if len(desc) < 16 {
		return fail(off, "NT_FILE of %d bytes", len(desc))
	}
	count, page := le.Uint64(desc), le.Uint64(desc[8:])
	if count > maxCoreFiles || count*24 > uint64(len(desc)-16) {
		return fail(off, "NT_FILE claims %d entries in %d bytes", count, len(desc))
	}
	if page == 0 || page&(page-1) != 0 || page > 1<<30 {
		return fail(off, "NT_FILE page size %d", page)
	}
	names := desc[16+count*24:]
	for i := uint64(0); i < count; i++ {
		e := desc[16+i*24:]
		m := CoreMapping{Start: le.Uint64(e), End: le.Uint64(e[8:])}
		pg := le.Uint64(e[16:])
		if pg > (1<<64-1)/page || m.End < m.Start {
			return fail(off, "NT_FILE entry %d: range %#x-%#x, offset %#x pages", i, m.Start, m.End, pg)
		}
		m.Offset = pg * page
		j := bytes.IndexByte(names, 0)
		if j < 0 {
			return fail(off, "NT_FILE has %d paths for %d entries", i, count)
		}
		m.Path, names = string(names[:j]), names[j+1:]
		c.Files = append(c.Files, m)
	}
	return true
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// AuxvValue returns the value of key in the auxiliary vector.
func (c *CoreFile) AuxvValue(key uint64) (uint64, bool) {
	for _, e := range c.Auxv {
		if e.Key == key {
			return e.Val, true
		}
	}
	return 0, false
}

// segment returns the PT_LOAD segment holding addr, or nil.
func (c *CoreFile) segment(addr uint64) *CoreSegment {
	s := c.Segments
	i := sort.Search(len(s), func(i int) bool { return s[i].Vaddr+s[i].Memsz > addr })
	if i < len(s) && s[i].Vaddr <= addr {
		return &s[i]
	}
	return nil
}

// ReadMemory reads dumped memory: the bytes the core holds (not the files
// it omitted; Core's Memory adds those).
func (c *CoreFile) ReadMemory(addr uint64, p []byte) error {
	for len(p) > 0 {
		s := c.segment(addr)
		if s == nil || addr-s.Vaddr >= s.Filesz {
			return fmt.Errorf("%w: %#x not in the core %s", arch.ErrBadAddress, addr, c.Name)
		}
		n := uint64(len(p))
		if avail := s.Filesz - (addr - s.Vaddr); n > avail {
			n = avail
		}
		if _, err := c.r.ReadAt(p[:n], int64(s.Off+addr-s.Vaddr)); err != nil {
			return fmt.Errorf("%w: %#x: %v", arch.ErrBadAddress, addr, err)
		}
		p, addr = p[n:], addr+n
	}
	return nil
}

// maps returns the core's file mappings as maps lines, executable where a
// PT_LOAD segment covering them is, plus the vDSO from AT_SYSINFO_EHDR.
func (c *CoreFile) maps() []mapping {
	var out []mapping
	for _, f := range c.Files {
		m := mapping{Start: f.Start, End: f.End, Offset: f.Offset, Path: f.Path, Perms: "r--p"}
		segs := c.Segments
		i := sort.Search(len(segs), func(i int) bool { return segs[i].Vaddr+segs[i].Memsz > f.Start })
		for ; i < len(segs) && segs[i].Vaddr < f.End; i++ {
			if segs[i].Flags&elf.PF_X != 0 {
				m.Perms = "r-xp"
				break
			}
		}
		out = append(out, m)
	}
	var vdso uint64
	if v, ok := c.AuxvValue(atSysinfoEHDR); ok {
		if s := c.segment(v); s != nil && s.Filesz > 0 {
			out = append(out, mapping{Start: s.Vaddr, End: s.Vaddr + s.Memsz, Perms: "r-xp", Path: "[vdso]"})
			vdso = s.Vaddr
		}
	}
	// Executable memory no file backs: a JIT's code (V8's code space,
	// HotSpot's code cache), which the unwinder walks by frame pointer
	// as in a live process, and the runtime readers name.
	for _, s := range c.Segments {
		if s.Flags&elf.PF_X == 0 || s.Memsz == 0 || s.Vaddr == vdso {
			continue
		}
		file := false
		for _, f := range c.Files {
			file = file || f.Start < s.Vaddr+s.Memsz && s.Vaddr < f.End
		}
		if !file {
			out = append(out, mapping{Start: s.Vaddr, End: s.Vaddr + s.Memsz, Perms: "r-xp"})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// exePath returns the path of the main executable as the core names it:
// the file mapped at AT_ENTRY (or AT_PHDR).
func (c *CoreFile) exePath() string {
	for _, key := range []uint64{atENTRY, atPHDR} {
		if v, ok := c.AuxvValue(key); ok {
			for _, f := range c.Files {
				if f.Start <= v && v < f.End {
					return f.Path
				}
			}
		}
	}
	return ""
}

// Core snapshots the threads of the ELF core dump at path. Memory the core
// omitted (usually the text of mapped files) is read from the files its
// NT_FILE note names, under opts.Root, or from opts.Exe for the main
// executable.
func Core(path string, opts *Options) (*Snapshot, error) {
	c, err := OpenCore(path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Snapshot(opts)
}

// Snapshot unwinds every thread of c.
func (c *CoreFile) Snapshot(opts *Options) (*Snapshot, error) {
	var root, exe string
	if opts != nil {
		root, exe = opts.Root, opts.Exe
	}
	exePath := c.exePath()
	resolve := func(p string) string {
		if exe != "" && (p == exePath || exePath == "" && filepath.Base(p) == filepath.Base(exe)) {
			return exe
		}
		if _, err := os.Stat(root + p); err == nil {
			return root + p
		}
		return ""
	}
	maps := c.maps()
	cache := opts.tables()
	for i := range maps {
		// gdb's gcore writes no PT_LOAD at all for file text it omits, so
		// the file's own program headers say what is executable.
		m := &maps[i]
		if m.Exec() || m.Path == "[vdso]" {
			continue
		}
		if file := resolve(m.Path); file != "" {
			if fi, err := cache.file(file); err == nil && fi.execAt(m.Offset, m.End-m.Start) {
				m.Perms = "r-xp"
			}
		}
	}
	fm := &fileMem{core: c, files: map[string]*os.File{}}
	defer fm.close()
	for _, m := range maps {
		if m.Path != "[vdso]" {
			fm.maps = append(fm.maps, fileMap{mapping: m, file: resolve(m.Path)})
		}
	}
	mem := newPageCache(4, fm.fill)
	image := func(start, end uint64) []byte {
		if end-start > 1<<20 {
			return nil
		}
		b := make([]byte, end-start)
		if c.ReadMemory(start, b) != nil {
			return nil
		}
		return b
	}
	mods, set := loadModules(maps, cache, func(m *mapping) string { return resolve(m.Path) }, image)
	snap := &Snapshot{Pid: c.Pid, Name: c.Comm, Cmdline: c.Args, Arch: c.Arch, Modules: mods}
	if snap.Pid == 0 {
		snap.Pid = c.Threads[0].Tid
	}
	for _, ct := range c.Threads {
		snap.Threads = append(snap.Threads, Thread{Tid: ct.Tid, Regs: ct.Regs})
	}
	if err := unwindThreads(snap.Threads, set, mem, opts.maxFrames()); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if opts != nil && opts.Python {
		c.readPython(snap, maps, resolve)
	}
	if opts != nil && opts.JIT {
		snap.JITErrors = c.readJIT(snap, maps, resolve, mem)
	}
	return snap, nil
}

type fileMap struct {
	mapping
	file string // "" when the file is not available
}

// fileMem fills pages from the core, else from the mapped file.
type fileMem struct {
	core  *CoreFile
	maps  []fileMap
	files map[string]*os.File
}

func (m *fileMem) fill(addr uint64, buf []byte) int {
	n := 0
	for ; n+pageSize <= len(buf); n += pageSize {
		if !m.page(addr+uint64(n), buf[n:n+pageSize]) {
			break
		}
	}
	return n
}

func (m *fileMem) page(addr uint64, p []byte) bool {
	if m.core.ReadMemory(addr, p) == nil {
		return true
	}
	for i := range m.maps {
		fm := &m.maps[i]
		if addr < fm.Start || addr >= fm.End || fm.file == "" {
			continue
		}
		f, ok := m.files[fm.file]
		if !ok {
			f, _ = os.Open(fm.file)
			m.files[fm.file] = f
		}
		if f == nil {
			return false
		}
		// A page past the file's end reads short; the rest is zero, as
		// the kernel maps it.
		clear(p)
		k, err := f.ReadAt(p, int64(fm.Offset+addr-fm.Start))
		return k > 0 || err == nil
	}
	return false
}

func (m *fileMem) close() {
	for _, f := range m.files {
		if f != nil {
			f.Close()
		}
	}
}
