package snapshot

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sort"
	"time"
	"unicode/utf16"
)

// MinidumpError says where in a minidump decoding failed.
type MinidumpError struct {
	File string
	Off  int64
	Msg  string
}

func (e *MinidumpError) Error() string {
	return fmt.Sprintf("snapshot: minidump %s: offset %#x: %s", e.File, e.Off, e.Msg)
}

// Minidump stream types and constants (minidumpapiset.h).
const (
	mdSignature         = 0x504d444d // "MDMP"
	mdVersion           = 0xa793
	mdThreadList        = 3
	mdModuleList        = 4
	mdMemoryList        = 5
	mdException         = 6
	mdSystemInfo        = 7
	mdMemory64List      = 9
	mdMiscInfo          = 15
	mdThreadNames       = 24
	mdArchAMD64         = 9
	mdArchARM64         = 12
	mdThreadSize        = 48
	mdModuleSize        = 108
	mdMemDescSize       = 16
	mdMiscProcessID     = 1
	cvRSDS              = 0x53445352 // "RSDS"
	maxMinidumpStreams  = 1 << 12
	maxMinidumpThreads  = 1 << 16
	maxMinidumpModules  = 1 << 14
	maxMinidumpRanges   = 1 << 20
	maxMinidumpString   = 1 << 15
	maxMinidumpContext  = 1 << 14
	maxMinidumpCodeView = 24 + 4096
)

// Minidump is a parsed Windows minidump (MDMP): its threads with their
// CONTEXT records, its modules with their CodeView records and its memory
// ranges (MemoryListStream and Memory64ListStream). Memory is read lazily
// through the io.ReaderAt; every count and size read from the file is
// checked against the file's size and a cap before anything is allocated.
// It reads dumps of any architecture on any host; stacks are unwound for
// x64 dumps.
type Minidump struct {
	Name      string
	Arch      uint16 // PROCESSOR_ARCHITECTURE_*: 9 is x64, 12 is arm64
	Pid       int    // from MiscInfoStream, 0 if absent
	Time      uint32 // the header's TimeDateStamp
	Threads   []MinidumpThread
	Modules   []MinidumpModule
	Memory    []MinidumpRange // sorted by Start
	Exception *MinidumpException

	r       io.ReaderAt
	size    int64
	closer  io.Closer
	stopped time.Duration // a live capture: how long the threads were suspended
}

// MinidumpThread is one MINIDUMP_THREAD.
type MinidumpThread struct {
	Tid     uint32
	Teb     uint64
	Name    string // from ThreadNamesStream
	Context []byte // the raw CONTEXT record
	// StackStart and StackSize are the stack memory the dump holds for
	// the thread (also found through ReadMemory).
	StackStart, StackSize uint64
}

// MinidumpModule is one MINIDUMP_MODULE.
type MinidumpModule struct {
	Base          uint64
	Size          uint32
	Checksum      uint32
	TimeDateStamp uint32
	Name          string
	// CodeView RSDS identity, when the module's CvRecord holds one.
	HasCodeView bool
	PDBGUID     [16]byte
	PDBAge      uint32
	PDBPath     string
	CodeView    []byte // the raw record
}

// MinidumpRange is memory the dump holds: [Start, Start+Size) at Off.
type MinidumpRange struct {
	Start, Size uint64
	Off         int64
}

// MinidumpException is the ExceptionStream: the thread that faulted and
// its CONTEXT at the fault.
type MinidumpException struct {
	Tid     uint32
	Code    uint32
	Address uint64
	Context []byte
}

// OpenMinidump opens and parses the minidump at path.
func OpenMinidump(path string) (*Minidump, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	d, err := NewMinidump(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	d.closer = f
	return d, nil
}

// Stopped is, for a capture of a live process, how long its threads were
// suspended; 0 for a dump read from a file.
func (d *Minidump) Stopped() time.Duration { return d.stopped }

// Close closes the file OpenMinidump opened.
func (d *Minidump) Close() error {
	if d.closer == nil {
		return nil
	}
	return d.closer.Close()
}

// mdReader is a sticky-error reader of little-endian fields.
type mdReader struct {
	d   *Minidump
	err error
}

func (m *mdReader) fail(off int64, format string, args ...any) {
	if m.err == nil {
		m.err = &MinidumpError{File: m.d.Name, Off: off, Msg: fmt.Sprintf(format, args...)}
	}
}

// bytes reads n bytes at off, failing for ranges past the file's end or
// over the cap.
func (m *mdReader) bytes(off int64, n uint64, limit uint64, what string) []byte {
	if m.err != nil {
		return nil
	}
	if n > limit {
		m.fail(off, "%s of %d bytes is over the cap of %d", what, n, limit)
		return nil
	}
	if off < 0 || uint64(off)+n > uint64(m.d.size) {
		m.fail(off, "%s of %d bytes runs past the end of the file (%d bytes)", what, n, m.d.size)
		return nil
	}
	b := make([]byte, n)
	if _, err := m.d.r.ReadAt(b, off); err != nil {
		m.fail(off, "reading %s: %v", what, err)
		return nil
	}
	return b
}

var le = binary.LittleEndian

// NewMinidump parses a minidump of the given size from r; name is used in
// errors.
func NewMinidump(r io.ReaderAt, size int64, name string) (*Minidump, error) {
	d := &Minidump{Name: name, r: r, size: size}
	m := &mdReader{d: d}
	h := m.bytes(0, 32, 32, "header")
	if m.err != nil {
		return nil, m.err
	}
	if le.Uint32(h) != mdSignature {
		return nil, &MinidumpError{File: name, Msg: "not a minidump (no MDMP signature)"}
	}
	if le.Uint32(h[4:])&0xffff != mdVersion {
		return nil, &MinidumpError{File: name, Off: 4, Msg: fmt.Sprintf("version %#x, want %#x", le.Uint32(h[4:])&0xffff, mdVersion)}
	}
	n, dirRVA := le.Uint32(h[8:]), le.Uint32(h[12:])
	d.Time = le.Uint32(h[20:])
	if n > maxMinidumpStreams {
		return nil, &MinidumpError{File: name, Off: 8, Msg: fmt.Sprintf("%d streams, over the cap of %d", n, maxMinidumpStreams)}
	}
	dir := m.bytes(int64(dirRVA), uint64(n)*12, maxMinidumpStreams*12, "stream directory")
	if m.err != nil {
		return nil, m.err
	}
	var threadNames map[uint32]string
	for i := uint32(0); i < n; i++ {
		e := dir[12*i:]
		typ, dsize, rva := le.Uint32(e), le.Uint32(e[4:]), int64(le.Uint32(e[8:]))
		switch typ {
		case mdThreadList:
			d.parseThreads(m, rva, dsize)
		case mdModuleList:
			d.parseModules(m, rva, dsize)
		case mdMemoryList:
			d.parseMemory(m, rva, dsize)
		case mdMemory64List:
			d.parseMemory64(m, rva, dsize)
		case mdSystemInfo:
			if b := m.bytes(rva, 2, 2, "system info"); b != nil {
				d.Arch = le.Uint16(b)
			}
		case mdMiscInfo:
			if b := m.bytes(rva, 12, 12, "misc info"); b != nil && le.Uint32(b[4:])&mdMiscProcessID != 0 {
				d.Pid = int(le.Uint32(b[8:]))
			}
		case mdException:
			if b := m.bytes(rva, 168, 168, "exception stream"); b != nil {
				x := &MinidumpException{Tid: le.Uint32(b), Code: le.Uint32(b[8:]), Address: le.Uint64(b[24:])}
				x.Context = m.bytes(int64(le.Uint32(b[164:])), uint64(le.Uint32(b[160:])), maxMinidumpContext, "exception context")
				d.Exception = x
			}
		case mdThreadNames:
			threadNames = d.parseThreadNames(m, rva, dsize)
		}
		if m.err != nil {
			return nil, m.err
		}
	}
	for i := range d.Threads {
		d.Threads[i].Name = threadNames[d.Threads[i].Tid]
	}
	sort.Slice(d.Memory, func(i, j int) bool { return d.Memory[i].Start < d.Memory[j].Start })
	return d, nil
}

// count reads a list's element count and checks the list fits its stream.
func (m *mdReader) count(rva int64, dsize uint32, head, elem uint64, limit uint64, what string) uint64 {
	b := m.bytes(rva, 4, 4, what+" count")
	if b == nil {
		return 0
	}
	n := uint64(le.Uint32(b))
	if n > limit {
		m.fail(rva, "%d %s, over the cap of %d", n, what, limit)
		return 0
	}
	if head+n*elem > uint64(dsize) && dsize != 0 {
		// Some writers pad; none writes a list longer than its stream.
		m.fail(rva, "%d %s need %d bytes; the stream has %d", n, what, head+n*elem, dsize)
		return 0
	}
	return n
}

func (d *Minidump) parseThreads(m *mdReader, rva int64, dsize uint32) {
	n := m.count(rva, dsize, 4, mdThreadSize, maxMinidumpThreads, "threads")
	b := m.bytes(rva+4, n*mdThreadSize, maxMinidumpThreads*mdThreadSize, "thread list")
	for i := uint64(0); i < n && m.err == nil; i++ {
		e := b[i*mdThreadSize:]
		t := MinidumpThread{Tid: le.Uint32(e), Teb: le.Uint64(e[16:]),
			StackStart: le.Uint64(e[24:]), StackSize: uint64(le.Uint32(e[32:]))}
		stackRVA := int64(le.Uint32(e[36:]))
		if t.StackSize > 0 {
			if stackRVA+int64(t.StackSize) > d.size {
				m.fail(rva+4+int64(i*mdThreadSize), "thread %d: stack of %d bytes at %#x runs past the end of the file", t.Tid, t.StackSize, stackRVA)
				return
			}
			d.Memory = append(d.Memory, MinidumpRange{Start: t.StackStart, Size: t.StackSize, Off: stackRVA})
		}
		t.Context = m.bytes(int64(le.Uint32(e[44:])), uint64(le.Uint32(e[40:])), maxMinidumpContext, "thread context")
		d.Threads = append(d.Threads, t)
	}
}

func (d *Minidump) parseModules(m *mdReader, rva int64, dsize uint32) {
	n := m.count(rva, dsize, 4, mdModuleSize, maxMinidumpModules, "modules")
	b := m.bytes(rva+4, n*mdModuleSize, maxMinidumpModules*mdModuleSize, "module list")
	for i := uint64(0); i < n && m.err == nil; i++ {
		e := b[i*mdModuleSize:]
		mod := MinidumpModule{Base: le.Uint64(e), Size: le.Uint32(e[8:]), Checksum: le.Uint32(e[12:]), TimeDateStamp: le.Uint32(e[16:])}
		mod.Name = d.readString(m, int64(le.Uint32(e[20:])))
		// VS_FIXEDFILEINFO is 52 bytes at 24; CvRecord follows at 76.
		if cvSize, cvRVA := le.Uint32(e[76:]), int64(le.Uint32(e[80:])); cvSize > 0 && cvRVA != 0 {
			cv := m.bytes(cvRVA, uint64(cvSize), maxMinidumpCodeView, "CodeView record")
			mod.CodeView = cv
			if len(cv) >= 24 && le.Uint32(cv) == cvRSDS {
				mod.HasCodeView = true
				copy(mod.PDBGUID[:], cv[4:20])
				mod.PDBAge = le.Uint32(cv[20:])
				name := cv[24:]
				for j, c := range name {
					if c == 0 {
						name = name[:j]
						break
					}
				}
				mod.PDBPath = string(name)
			}
		}
		d.Modules = append(d.Modules, mod)
	}
}

func (d *Minidump) parseMemory(m *mdReader, rva int64, dsize uint32) {
	n := m.count(rva, dsize, 4, mdMemDescSize, maxMinidumpRanges, "memory ranges")
	b := m.bytes(rva+4, n*mdMemDescSize, maxMinidumpRanges*mdMemDescSize, "memory list")
	for i := uint64(0); i < n && m.err == nil; i++ {
		e := b[i*mdMemDescSize:]
		r := MinidumpRange{Start: le.Uint64(e), Size: uint64(le.Uint32(e[8:])), Off: int64(le.Uint32(e[12:]))}
		if uint64(r.Off)+r.Size > uint64(d.size) {
			m.fail(rva+4+int64(i*mdMemDescSize), "memory range %#x+%d at %#x runs past the end of the file", r.Start, r.Size, r.Off)
			return
		}
		d.addRange(r)
	}
}

func (d *Minidump) parseMemory64(m *mdReader, rva int64, dsize uint32) {
	h := m.bytes(rva, 16, 16, "memory64 list header")
	if h == nil {
		return
	}
	n, off := le.Uint64(h), le.Uint64(h[8:])
	if n > maxMinidumpRanges || 16+n*16 > uint64(dsize) {
		m.fail(rva, "%d memory64 ranges in a stream of %d bytes (cap %d)", n, dsize, maxMinidumpRanges)
		return
	}
	b := m.bytes(rva+16, n*16, maxMinidumpRanges*16, "memory64 list")
	for i := uint64(0); i < n && m.err == nil; i++ {
		start, size := le.Uint64(b[16*i:]), le.Uint64(b[16*i+8:])
		if off > uint64(d.size) || size > uint64(d.size)-off {
			m.fail(rva+16+int64(16*i), "memory64 range %#x+%d at %#x runs past the end of the file", start, size, off)
			return
		}
		d.addRange(MinidumpRange{Start: start, Size: size, Off: int64(off)})
		off += size
	}
}

// addRange adds r unless a thread's stack already covers it.
func (d *Minidump) addRange(r MinidumpRange) {
	for _, x := range d.Memory {
		if x.Start == r.Start && x.Size == r.Size {
			return
		}
	}
	d.Memory = append(d.Memory, r)
}

func (d *Minidump) parseThreadNames(m *mdReader, rva int64, dsize uint32) map[uint32]string {
	n := m.count(rva, dsize, 4, 12, maxMinidumpThreads, "thread names")
	b := m.bytes(rva+4, n*12, maxMinidumpThreads*12, "thread names")
	names := map[uint32]string{}
	for i := uint64(0); i < n && m.err == nil; i++ {
		names[le.Uint32(b[12*i:])] = d.readString(m, int64(le.Uint64(b[12*i+4:])))
	}
	return names
}

// readString reads a MINIDUMP_STRING (a byte length, then UTF-16).
func (d *Minidump) readString(m *mdReader, rva int64) string {
	if rva == 0 {
		return ""
	}
	b := m.bytes(rva, 4, 4, "string length")
	if b == nil {
		return ""
	}
	n := uint64(le.Uint32(b))
	s := m.bytes(rva+4, n&^1, maxMinidumpString, "string")
	u := make([]uint16, len(s)/2)
	for i := range u {
		u[i] = le.Uint16(s[2*i:])
	}
	return string(utf16.Decode(u))
}

// ReadMemory fills p from the dump's memory at addr; it implements
// arch.Memory. It fails unless every byte is in the dump.
func (d *Minidump) ReadMemory(addr uint64, p []byte) error {
	for len(p) > 0 {
		i := sort.Search(len(d.Memory), func(i int) bool { return d.Memory[i].Start+d.Memory[i].Size > addr })
		if i == len(d.Memory) || d.Memory[i].Start > addr {
			return fmt.Errorf("snapshot: minidump %s: address %#x not in the dump", d.Name, addr)
		}
		r := d.Memory[i]
		n := min(uint64(len(p)), r.Start+r.Size-addr)
		if _, err := d.r.ReadAt(p[:n], r.Off+int64(addr-r.Start)); err != nil {
			return fmt.Errorf("snapshot: minidump %s: reading %#x: %w", d.Name, addr, err)
		}
		p = p[n:]
		addr += n
	}
	return nil
}
