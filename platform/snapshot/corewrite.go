package snapshot

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/rawstack/rawstack/arch"
)

// An Image is the state of a stopped process that [Dump] copied: each
// thread's registers and the process's private memory, enough for a
// debugger's core-file reader (delve's, gdb) to walk the process's data
// structures after the process runs again. [Image.WriteCore] writes it as
// an ELF core file.
type Image struct {
	Pid  int
	Arch arch.Arch
	// Time is CLOCK_MONOTONIC in ns while the threads were stopped.
	Time    int64
	Threads []ImageThread
	// Auxv is the process's auxiliary vector (/proc/PID/auxv), which
	// tells a reader where a position-independent executable was loaded.
	Auxv []byte
	// Regions are the copied mappings, sorted by Start.
	Regions []Region
	// Files are the executable's file mappings, for the core's NT_FILE
	// note: a reader maps them from the executable instead of the core.
	Files []FileMapping
	// Stopped is how long the threads were stopped.
	Stopped time.Duration
	// Copied is how many bytes of memory were copied; the rest of each
	// region was never touched by the process and reads as zeros.
	Copied int64
}

// ImageThread is one thread's general-purpose registers, in the order of
// the kernel's user_regs_struct (elf_gregset_t).
type ImageThread struct {
	Tid   int
	Gregs []uint64
}

// Region is one mapping of the process. Runs hold the pages that were
// copied; every other page of [Start, End) is zero.
type Region struct {
	Start, End uint64
	Perms      string // "rw-p"
	Runs       []Run
}

// Run is copied memory at Addr.
type Run struct {
	Addr uint64
	Data []byte
}

// FileMapping is one mapping of a file: [Start, End) holds the file's
// bytes from Offset on.
type FileMapping struct {
	Start, End, Offset uint64
	Path               string
}

// ELF constants of core files (System V ABI, Linux's elfcore.h).
const (
	ntPrstatus = 1
	ntAuxv     = 6
	ntFile     = 0x46494c45
	ptLoad     = 1
	ptNote     = 4
	pfX        = 1
	pfW        = 2
	pfR        = 4
	// prstatusRegOff is the offset of pr_reg in struct elf_prstatus on
	// 64-bit Linux: siginfo (12), cursig (2+2), sigpend, sighold, four
	// pids, four timevals.
	prstatusRegOff = 112
)

// WriteCore writes im to w as an ELF core file: one PT_NOTE (NT_PRSTATUS
// per thread, NT_AUXV, NT_FILE for the executable's mappings) and one
// PT_LOAD per region. A region's untouched pages are left unwritten, so
// on a file system with sparse files (tmpfs, a memfd) they take no space
// and read as zeros.
func (im *Image) WriteCore(w io.WriterAt) (size int64, err error) {
	var machine uint16
	var nregs int
	switch im.Arch {
	case arch.AMD64:
		machine, nregs = 62, gregsAMD64
	case arch.ARM64:
		machine, nregs = 183, gregsARM64
	default:
		return 0, fmt.Errorf("snapshot: core of pid %d: unsupported architecture %v", im.Pid, im.Arch)
	}
	le := binary.LittleEndian
	var notes []byte
	note := func(typ uint32, desc []byte) {
		notes = le.AppendUint32(notes, 5) // "CORE\0"
		notes = le.AppendUint32(notes, uint32(len(desc)))
		notes = le.AppendUint32(notes, typ)
		notes = append(notes, "CORE\x00\x00\x00\x00"...)
		notes = append(notes, desc...)
		for len(notes)%4 != 0 {
			notes = append(notes, 0)
		}
	}
	// The thread that ran first is listed first: readers take it as the
	// current thread.
	for _, t := range im.Threads {
		if len(t.Gregs) < nregs {
			return 0, fmt.Errorf("snapshot: core of pid %d: tid %d has %d registers, want %d", im.Pid, t.Tid, len(t.Gregs), nregs)
		}
		d := make([]byte, prstatusRegOff+nregs*8+8)
		le.PutUint32(d[32:], uint32(t.Tid))  // pr_pid
		le.PutUint32(d[40:], uint32(im.Pid)) // pr_pgrp: unknown, the pid
		for i := 0; i < nregs; i++ {
			le.PutUint64(d[prstatusRegOff+i*8:], t.Gregs[i])
		}
		note(ntPrstatus, d)
	}
	if len(im.Auxv) > 0 {
		note(ntAuxv, im.Auxv)
	}
	if len(im.Files) > 0 {
		d := le.AppendUint64(nil, uint64(len(im.Files)))
		d = le.AppendUint64(d, pageSize)
		for _, f := range im.Files {
			d = le.AppendUint64(d, f.Start)
			d = le.AppendUint64(d, f.End)
			d = le.AppendUint64(d, f.Offset/pageSize)
		}
		for _, f := range im.Files {
			d = append(d, f.Path...)
			d = append(d, 0)
		}
		note(ntFile, d)
	}

	const ehdrSize, phdrSize = 64, 56
	nph := 1 + len(im.Regions)
	noteOff := uint64(ehdrSize + nph*phdrSize)
	dataOff := (noteOff + uint64(len(notes)) + pageSize - 1) &^ (pageSize - 1)
	head := make([]byte, 0, noteOff)
	head = append(head, 0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* LE */, 1 /* version */, 0 /* SysV */)
	head = append(head, make([]byte, 8)...)
	head = le.AppendUint16(head, 4) // ET_CORE
	head = le.AppendUint16(head, machine)
	head = le.AppendUint32(head, 1)
	head = le.AppendUint64(head, 0)        // entry
	head = le.AppendUint64(head, ehdrSize) // phoff
	head = le.AppendUint64(head, 0)        // shoff
	head = le.AppendUint32(head, 0)        // flags
	head = le.AppendUint16(head, ehdrSize)
	head = le.AppendUint16(head, phdrSize)
	head = le.AppendUint16(head, uint16(min(nph, 0xffff)))
	head = le.AppendUint16(head, 64) // shentsize
	head = le.AppendUint16(head, 0)  // shnum
	head = le.AppendUint16(head, 0)  // shstrndx
	if nph > 0xffff {
		return 0, fmt.Errorf("snapshot: core of pid %d: %d regions, an ELF file holds at most %d", im.Pid, len(im.Regions), 0xffff-1)
	}
	phdr := func(typ, flags uint32, off, vaddr, filesz, memsz, align uint64) {
		head = le.AppendUint32(head, typ)
		head = le.AppendUint32(head, flags)
		head = le.AppendUint64(head, off)
		head = le.AppendUint64(head, vaddr)
		head = le.AppendUint64(head, 0) // paddr
		head = le.AppendUint64(head, filesz)
		head = le.AppendUint64(head, memsz)
		head = le.AppendUint64(head, align)
	}
	phdr(ptNote, 0, noteOff, 0, uint64(len(notes)), 0, 4)
	off := dataOff
	offs := make([]uint64, len(im.Regions))
	for i, r := range im.Regions {
		if r.End < r.Start {
			return 0, fmt.Errorf("snapshot: core of pid %d: region %#x-%#x ends before it starts", im.Pid, r.Start, r.End)
		}
		var flags uint32
		if len(r.Perms) >= 3 {
			if r.Perms[0] == 'r' {
				flags |= pfR
			}
			if r.Perms[1] == 'w' {
				flags |= pfW
			}
			if r.Perms[2] == 'x' {
				flags |= pfX
			}
		}
		size := r.End - r.Start
		phdr(ptLoad, flags, off, r.Start, size, size, pageSize)
		offs[i] = off
		off += (size + pageSize - 1) &^ (pageSize - 1)
	}
	head = append(head, notes...)
	if _, err := w.WriteAt(head, 0); err != nil {
		return 0, err
	}
	for i, r := range im.Regions {
		for _, run := range r.Runs {
			if run.Addr < r.Start || run.Addr-r.Start+uint64(len(run.Data)) > r.End-r.Start {
				return 0, fmt.Errorf("snapshot: core of pid %d: run at %#x lies outside its region %#x-%#x", im.Pid, run.Addr, r.Start, r.End)
			}
			if _, err := w.WriteAt(run.Data, int64(offs[i]+run.Addr-r.Start)); err != nil {
				return 0, err
			}
		}
	}
	// The last region's tail may be a hole: a byte at the end gives the
	// file its full size.
	if off > dataOff {
		last := im.Regions[len(im.Regions)-1]
		if n := len(last.Runs); n == 0 || last.Runs[n-1].Addr+uint64(len(last.Runs[n-1].Data)) < last.End {
			if _, err := w.WriteAt([]byte{0}, int64(offs[len(offs)-1]+last.End-last.Start-1)); err != nil {
				return 0, err
			}
		}
	}
	return int64(off), nil
}
