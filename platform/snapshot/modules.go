package snapshot

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/elfnote"
	"github.com/rawstack/rawstack/internal/mapfile"
)

// TableCache keeps what a snapshot reads from each ELF file (program
// headers, build id, unwind table), keyed by path, size and modification
// time, so repeated snapshots of the same programs parse each file once.
// It is safe for concurrent use.
type TableCache struct {
	mu sync.Mutex
	m  map[fileKey]*fileInfo
}

// NewTableCache returns an empty cache.
func NewTableCache() *TableCache { return &TableCache{m: map[fileKey]*fileInfo{}} }

type fileKey struct {
	path  string
	size  int64
	mtime int64
}

type fileInfo struct {
	progs   []elf.ProgHeader
	buildID []byte
	arch    arch.Arch

	table *arch.Table // nil: no usable unwind info
	// mapped says table is lazy over the mapped file's bytes.
	mapped bool
}

// file returns the information of the ELF file at path.
func (c *TableCache) file(path string) (*fileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	k := fileKey{cacheKeyPath(path), st.Size(), st.ModTime().UnixNano()}
	c.mu.Lock()
	fi := c.m[k]
	c.mu.Unlock()
	if fi != nil {
		return fi, nil
	}
	// The file is mapped, not read: a lazy table reads the FDEs it needs
	// in place.
	m, err := mapfile.Open(path)
	if err != nil {
		return nil, err
	}
	err = mapfile.Guard(func() error {
		fi, err = readFileInfo(m, m.Data(), path)
		return err
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	if !fi.mapped {
		m.Close() // everything kept was copied out
	} else {
		// The lazy table reads the mapping: unmap it when the table
		// (which the unwinder's modules hold, maybe longer than the
		// cache holds the fileInfo) is unreachable.
		runtime.AddCleanup(fi.table, func(m *mapfile.File) { m.Close() }, m)
	}
	c.mu.Lock()
	c.m[k] = fi
	c.mu.Unlock()
	return fi, nil
}

// cacheKeyPath drops a leading /proc/PID/root, so processes that share a
// root share the cache entries of their libraries.
func cacheKeyPath(p string) string {
	rest, ok := strings.CutPrefix(p, "/proc/")
	if !ok {
		return p
	}
	i := strings.IndexByte(rest, '/')
	if i <= 0 || strings.Trim(rest[:i], "0123456789") != "" || !strings.HasPrefix(rest[i:], "/root/") {
		return p
	}
	return rest[i+len("/root"):]
}

// image returns the information of an ELF image read from memory (the
// vDSO), keyed by a hash of its bytes.
func (c *TableCache) image(name string, b []byte) (*fileInfo, error) {
	h := fnv.New64a()
	h.Write(b)
	k := fileKey{path: fmt.Sprintf("%s#%x", name, h.Sum64()), size: int64(len(b))}
	c.mu.Lock()
	fi := c.m[k]
	c.mu.Unlock()
	if fi != nil {
		return fi, nil
	}
	fi, err := readFileInfo(bytes.NewReader(b), b, name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.m[k] = fi
	c.mu.Unlock()
	return fi, nil
}

// readFileInfo reads the ELF file r. mapped, when not nil, is all of r's
// bytes: a lazy table then reads its sections from it in place.
func readFileInfo(r io.ReaderAt, mapped []byte, path string) (*fileInfo, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	fi := &fileInfo{}
	for _, p := range f.Progs {
		fi.progs = append(fi.progs, p.ProgHeader)
	}
	switch f.Machine {
	case elf.EM_X86_64:
		fi.arch = arch.AMD64
	case elf.EM_AARCH64:
		fi.arch = arch.ARM64
	}
	fi.buildID = elfBuildID(f)
	fi.table, fi.mapped = unwindTable(f, fi.arch, mapped, path)
	return fi, nil
}

// unwindTable returns f's unwind table: arch's lazy table, which parses
// an FDE the first time the unwind meets a pc in it (libc has thousands; a
// snapshot needs a few dozen), over the sections' bytes in the mapped file
// where mapped (all of f's bytes) is not nil, else read from f. inPlace
// says the table reads mapped.
func unwindTable(f *elf.File, a arch.Arch, mapped []byte, path string) (t *arch.Table, inPlace bool) {
	// In place only for what arch.NewLazyTableELF would do no more for:
	// sections by header, one of .eh_frame and .debug_frame, and no PLT
	// stub rules (arm64 linkers emit no CFI for .plt; amd64's do).
	eh, hdr, df := f.Section(".eh_frame"), f.Section(".eh_frame_hdr"), f.Section(".debug_frame")
	if mapped == nil || a != arch.AMD64 || f.ByteOrder != binary.LittleEndian || (eh == nil) == (df == nil) {
		// A table with a format error still holds every entry that parsed.
		t, _ = arch.NewLazyTableELF(f, path)
		return t, false
	}
	data := func(s *elf.Section) []byte {
		if s == nil || s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_COMPRESSED != 0 ||
			s.Offset > uint64(len(mapped)) || s.FileSize > uint64(len(mapped))-s.Offset {
			return nil
		}
		return mapped[s.Offset : s.Offset+s.FileSize : s.Offset+s.FileSize]
	}
	s := arch.Sections{File: path, Arch: a, EHFrame: data(eh), EHFrameHdr: data(hdr), DebugFrame: data(df)}
	if eh != nil {
		s.EHFrameAddr = eh.Addr
	}
	if hdr != nil {
		s.EHFrameHdrAddr = hdr.Addr
	}
	if len(s.EHFrame) == 0 && len(s.DebugFrame) == 0 {
		t, _ = arch.NewLazyTableELF(f, path) // compressed or odd: read it
		return t, false
	}
	t, _ = arch.NewLazyTable(s)
	if t == nil {
		return nil, false
	}
	lazy, _, _ := t.Lazy()
	if lazy {
		// The unwind reads FDEs from these pages: fault them in now, on
		// the loader goroutine, while the threads are being stopped.
		faultIn(s.EHFrame)
		faultIn(s.DebugFrame)
	}
	return t, lazy
}

// faultInSink keeps faultIn's reads from being optimized away.
var faultInSink byte

// faultIn reads a byte of each page of b.
func faultIn(b []byte) {
	var x byte
	for i := 0; i < len(b); i += 4096 {
		x += b[i]
	}
	faultInSink = x
}

// bias returns the load bias of the file mapped at start from offset.
func (fi *fileInfo) bias(start, offset uint64) (uint64, bool) {
	f := &elf.File{}
	for _, ph := range fi.progs {
		f.Progs = append(f.Progs, &elf.Prog{ProgHeader: ph})
	}
	b, err := arch.LoadBias(f, start, offset)
	return b, err == nil
}

// execAt reports whether file bytes [off, off+size) overlap an executable
// PT_LOAD segment.
func (fi *fileInfo) execAt(off, size uint64) bool {
	for _, p := range fi.progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Off < off+size && off < p.Off+p.Filesz {
			return true
		}
	}
	return false
}

// maxNoteSegment caps the bytes of one note segment or section read.
const maxNoteSegment = 1 << 20

// elfBuildID returns the GNU build id of f, or nil.
func elfBuildID(f *elf.File) []byte {
	var id []byte
	look := func(b []byte, align uint64) {
		elfnote.ForEach(b, f.ByteOrder, align, func(name string, typ uint32, desc []byte, _ int) bool {
			if name == "GNU" && typ == 3 { // NT_GNU_BUILD_ID
				id = append([]byte(nil), desc...)
				return false
			}
			return true
		})
	}
	if s := f.Section(".note.gnu.build-id"); s != nil && s.Type == elf.SHT_NOTE && s.Size <= maxNoteSegment {
		if b, err := s.Data(); err == nil {
			look(b, s.Addralign)
		}
	}
	for _, p := range f.Progs {
		if id != nil {
			break
		}
		if p.Type != elf.PT_NOTE || p.Filesz > maxNoteSegment {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err == nil {
			look(b, p.Align)
		}
	}
	return id
}

// loadModules builds the modules of the executable mappings in maps,
// reading the distinct files concurrently. open names the file to read for
// a mapping (it returns "" when there is none); image reads an in-memory
// ELF image such as the vDSO (nil when unavailable).
func loadModules(maps []mapping, cache *TableCache, open func(m *mapping) string, image func(start, end uint64) []byte) ([]Module, *arch.Modules) {
	mods := make([]Module, 0, len(maps))
	var files []string
	infos := map[string]*fileInfo{}
	for i := range maps {
		m := &maps[i]
		if !m.Exec() {
			continue
		}
		mod := Module{Start: m.Start, End: m.End, Offset: m.Offset, Path: m.Path, Kind: format.ModuleELF}
		switch {
		case m.Path == "[vdso]":
			mod.Kind = format.ModuleVDSO
		case strings.HasPrefix(m.Path, "/"):
			mod.File = open(m)
			if _, ok := infos[mod.File]; !ok && mod.File != "" {
				infos[mod.File] = nil
				files = append(files, mod.File)
			}
		default:
			mod.Kind = format.ModuleAnon
		}
		mods = append(mods, mod)
	}
	// Parse the files on as many goroutines as there are CPUs to use: a
	// large library's unwind table takes milliseconds.
	results := make([]*fileInfo, len(files))
	var wg sync.WaitGroup
	next := make(chan int, len(files))
	for i := range files {
		next <- i
	}
	close(next)
	for w := 0; w < min(len(files), runtime.GOMAXPROCS(0)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i], _ = cache.file(files[i])
			}
		}()
	}
	var vdso *fileInfo
	for i := range mods {
		if mods[i].Kind == format.ModuleVDSO && image != nil {
			if b := image(mods[i].Start, mods[i].End); b != nil {
				vdso, _ = cache.image("[vdso]", b)
			}
		}
	}
	wg.Wait()
	for i, f := range files {
		infos[f] = results[i]
	}
	set := &arch.Modules{}
	for i := range mods {
		mod := &mods[i]
		fi := infos[mod.File]
		if mod.Kind == format.ModuleVDSO {
			fi = vdso
		}
		if fi == nil {
			mod.File = ""
		}
		am := arch.Module{Start: mod.Start, End: mod.End}
		if fi != nil {
			mod.BuildID = fi.buildID
			mod.Bias, mod.HaveBias = fi.bias(mod.Start, mod.Offset)
			switch {
			case !mod.HaveBias:
			case fi.table != nil:
				am.Table, am.Bias = fi.table, mod.Bias
				mod.HasCFI = true
			}
		}
		set.Add(am)
	}
	return mods, set
}

// unwindThreads unwinds every thread with registers through mem. Lazy
// tables read mapped files as the unwind asks for rules: a file truncated
// meanwhile gives an error wrapping mapfile.ErrFault rather than a crash.
func unwindThreads(threads []Thread, mods *arch.Modules, mem arch.Memory, maxFrames int) error {
	return mapfile.Guard(func() error {
		u := arch.NewUnwinder(mods)
		u.MaxFrames = maxFrames
		// mods holds every executable mapping: a caller in none ends a
		// walk (the garbage above a thread's first frame).
		if mods.Len() > 0 {
			u.Code = func(addr uint64) bool { return mods.Find(addr) != nil }
		}
		// One block holds the frames of every stack up to pcsPerThread
		// deep (a deeper one grows its own): hundreds of threads, one
		// allocation.
		const pcsPerThread = 32
		block := make([]uint64, len(threads)*pcsPerThread)
		for i := range threads {
			if t := &threads[i]; t.Err == nil {
				if t.PCs == nil {
					t.PCs = block[i*pcsPerThread : i*pcsPerThread : (i+1)*pcsPerThread]
				}
				t.PCs = u.Unwind(&t.Regs, mem, t.PCs[:0])
				t.Stop = u.Stop
			}
		}
		return nil
	})
}
