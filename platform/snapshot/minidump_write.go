package snapshot

import (
	"encoding/binary"
	"fmt"
	"io"
	"unicode/utf16"
)

// MinidumpData is what [WriteMinidump] writes: a process's threads with
// their CONTEXT records and stack memory, and its modules.
type MinidumpData struct {
	Arch    uint16 // PROCESSOR_ARCHITECTURE_*: 9 for x64
	Pid     uint32
	Time    uint32 // seconds since 1970
	Threads []MinidumpThreadData
	Modules []MinidumpModule // Base, Size, Checksum, TimeDateStamp, Name, and CodeView or the PDB fields
	// Memory is more memory to include (the stacks are included with
	// their threads).
	Memory []MinidumpMemory
}

// MinidumpThreadData is one thread to write.
type MinidumpThreadData struct {
	Tid     uint32
	Teb     uint64
	Name    string
	Context []byte // a CONTEXT record for Arch
	Stack   MinidumpMemory
}

// MinidumpMemory is a range of memory to write.
type MinidumpMemory struct {
	Start uint64
	Data  []byte
}

// mdBuilder lays a minidump out in memory: fixed structures first, then
// variable data appended, each at a 4-byte (contexts: 16-byte) boundary.
type mdBuilder struct{ b []byte }

func (m *mdBuilder) alloc(n, align int) int {
	for len(m.b)%align != 0 {
		m.b = append(m.b, 0)
	}
	off := len(m.b)
	m.b = append(m.b, make([]byte, n)...)
	return off
}

func (m *mdBuilder) blob(p []byte, align int) (size, rva uint32) {
	off := m.alloc(len(p), align)
	copy(m.b[off:], p)
	return uint32(len(p)), uint32(off)
}

func (m *mdBuilder) str(s string) uint32 {
	u := utf16.Encode([]rune(s))
	off := m.alloc(4+2*len(u)+2, 4)
	binary.LittleEndian.PutUint32(m.b[off:], uint32(2*len(u)))
	for i, c := range u {
		binary.LittleEndian.PutUint16(m.b[off+4+2*i:], c)
	}
	return uint32(off)
}

// WriteMinidump writes d as a minidump: SystemInfo, MiscInfo (the process
// id), ThreadList, ModuleList (with CodeView RSDS records), MemoryList
// (stacks and extra memory) and, when a thread has a name,
// ThreadNamesStream. Every reader of minidumps (WinDbg, dbghelp, LLVM's
// obj2yaml, rawstack's [NewMinidump]) reads these streams.
func WriteMinidump(w io.Writer, d *MinidumpData) error {
	le := binary.LittleEndian
	var m mdBuilder
	named := false
	for _, t := range d.Threads {
		named = named || t.Name != ""
	}
	nStreams := 5
	if named {
		nStreams++
	}
	m.alloc(32, 4)
	dir := m.alloc(12*nStreams, 4)
	le.PutUint32(m.b[0:], mdSignature)
	le.PutUint32(m.b[4:], mdVersion)
	le.PutUint32(m.b[8:], uint32(nStreams))
	le.PutUint32(m.b[12:], uint32(dir))
	le.PutUint32(m.b[20:], d.Time)
	stream := 0
	entry := func(typ uint32, off, size int) {
		e := dir + 12*stream
		le.PutUint32(m.b[e:], typ)
		le.PutUint32(m.b[e+4:], uint32(size))
		le.PutUint32(m.b[e+8:], uint32(off))
		stream++
	}

	si := m.alloc(56, 4)
	entry(mdSystemInfo, si, 56)
	le.PutUint16(m.b[si:], d.Arch)
	m.b[si+6] = 1                // NumberOfProcessors
	m.b[si+7] = 1                // ProductType: VER_NT_WORKSTATION
	le.PutUint32(m.b[si+8:], 10) // MajorVersion
	le.PutUint32(m.b[si+20:], 2) // PlatformId: VER_PLATFORM_WIN32_NT
	csd := m.str("")             // CSDVersion (readers follow it)
	le.PutUint32(m.b[si+24:], csd)

	mi := m.alloc(24, 4)
	entry(mdMiscInfo, mi, 24)
	le.PutUint32(m.b[mi:], 24)
	le.PutUint32(m.b[mi+4:], mdMiscProcessID)
	le.PutUint32(m.b[mi+8:], d.Pid)

	tl := m.alloc(4+mdThreadSize*len(d.Threads), 4)
	entry(mdThreadList, tl, 4+mdThreadSize*len(d.Threads))
	le.PutUint32(m.b[tl:], uint32(len(d.Threads)))

	ml := m.alloc(4+mdModuleSize*len(d.Modules), 4)
	entry(mdModuleList, ml, 4+mdModuleSize*len(d.Modules))
	le.PutUint32(m.b[ml:], uint32(len(d.Modules)))

	nMem := len(d.Memory)
	for _, t := range d.Threads {
		if len(t.Stack.Data) > 0 {
			nMem++
		}
	}
	mem := m.alloc(4+mdMemDescSize*nMem, 4)
	entry(mdMemoryList, mem, 4+mdMemDescSize*nMem)
	le.PutUint32(m.b[mem:], uint32(nMem))

	var tn int
	if named {
		tn = m.alloc(4+12*len(d.Threads), 4)
		entry(mdThreadNames, tn, 4+12*len(d.Threads))
		le.PutUint32(m.b[tn:], uint32(len(d.Threads)))
	}

	memIdx := 0
	addMem := func(start uint64, data []byte) (uint32, uint32) {
		size, rva := m.blob(data, 16)
		e := mem + 4 + mdMemDescSize*memIdx
		le.PutUint64(m.b[e:], start)
		le.PutUint32(m.b[e+8:], size)
		le.PutUint32(m.b[e+12:], rva)
		memIdx++
		return size, rva
	}
	for i, t := range d.Threads {
		if len(t.Context) > maxMinidumpContext {
			return fmt.Errorf("snapshot: minidump: thread %d: CONTEXT of %d bytes", t.Tid, len(t.Context))
		}
		csize, crva := m.blob(t.Context, 16)
		var ssize, srva uint32
		if len(t.Stack.Data) > 0 {
			ssize, srva = addMem(t.Stack.Start, t.Stack.Data)
		}
		e := tl + 4 + mdThreadSize*i
		le.PutUint32(m.b[e:], t.Tid)
		le.PutUint64(m.b[e+16:], t.Teb)
		le.PutUint64(m.b[e+24:], t.Stack.Start)
		le.PutUint32(m.b[e+32:], ssize)
		le.PutUint32(m.b[e+36:], srva)
		le.PutUint32(m.b[e+40:], csize)
		le.PutUint32(m.b[e+44:], crva)
		if named {
			name := m.str(t.Name)
			e := tn + 4 + 12*i
			le.PutUint32(m.b[e:], t.Tid)
			le.PutUint64(m.b[e+4:], uint64(name))
		}
	}
	for _, x := range d.Memory {
		addMem(x.Start, x.Data)
	}
	for i, mod := range d.Modules {
		name := m.str(mod.Name)
		cv := mod.CodeView
		if cv == nil && mod.HasCodeView {
			cv = make([]byte, 24, 24+len(mod.PDBPath)+1)
			le.PutUint32(cv, cvRSDS)
			copy(cv[4:], mod.PDBGUID[:])
			le.PutUint32(cv[20:], mod.PDBAge)
			cv = append(append(cv, mod.PDBPath...), 0)
		}
		var cvSize, cvRVA uint32
		if cv != nil {
			cvSize, cvRVA = m.blob(cv, 4)
		}
		e := ml + 4 + mdModuleSize*i
		le.PutUint64(m.b[e:], mod.Base)
		le.PutUint32(m.b[e+8:], mod.Size)
		le.PutUint32(m.b[e+12:], mod.Checksum)
		le.PutUint32(m.b[e+16:], mod.TimeDateStamp)
		le.PutUint32(m.b[e+20:], name)
		le.PutUint32(m.b[e+24:], 0xFEEF04BD) // VS_FIXEDFILEINFO signature
		le.PutUint32(m.b[e+76:], cvSize)
		le.PutUint32(m.b[e+80:], cvRVA)
	}
	if uint64(len(m.b)) > 1<<32-1 {
		return fmt.Errorf("snapshot: minidump of %d bytes is past the 4 GiB a MemoryListStream can address", len(m.b))
	}
	_, err := w.Write(m.b)
	return err
}
