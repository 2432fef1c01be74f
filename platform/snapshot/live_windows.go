//go:build windows

package snapshot

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/rawstack/rawstack/arch/winunwind"
	"github.com/rawstack/rawstack/internal/win"
	"github.com/rawstack/rawstack/platform/windows"
)

// maxLiveStack caps the stack bytes copied per thread of a live process.
const maxLiveStack = 256 << 10

// Process snapshots a live Windows process: it captures it as a minidump
// in memory ([ProcessMinidump]) and unwinds that.
func Process(pid int, opts *Options) (*Snapshot, error) {
	d, err := ProcessMinidump(pid)
	if err != nil {
		return nil, err
	}
	s, err := d.Snapshot(opts)
	if err != nil {
		return nil, err
	}
	s.Stopped = d.stopped
	return s, nil
}

// ProcessMinidump suspends every thread of process pid, reads each one's
// context and copies its stack from the stack pointer to the stack base
// (at most 256 KiB), resumes them all (on every path), and returns the
// capture as a minidump held in memory, with the modules and their
// CodeView identities read from the process's memory. The calling
// process cannot be captured this way: it would suspend itself.
func ProcessMinidump(pid int) (*Minidump, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("snapshot: bad pid %d", pid)
	}
	if uint32(pid) == win.CurrentProcessID() {
		return nil, fmt.Errorf("snapshot: pid %d is this process: a snapshot suspends every thread of its target", pid)
	}
	proc, err := win.OpenProcess(uint32(pid))
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	defer win.CloseHandle(proc)
	data := &MinidumpData{Arch: mdArchAMD64, Pid: uint32(pid), Time: uint32(time.Now().Unix())}
	mods, err := win.Modules(uint32(pid))
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	for _, m := range mods {
		mm := MinidumpModule{Base: m.Base, Size: uint32(m.Size), Name: m.Path}
		read := func(rva uint32, p []byte) error { return win.ReadMemory(proc, m.Base+uint64(rva), p) }
		if ii, err := windows.ReadImageInfo(read); err == nil {
			mm.TimeDateStamp = ii.TimeDateStamp
			if ii.HasCodeView {
				mm.HasCodeView, mm.PDBGUID, mm.PDBAge, mm.PDBPath = true, ii.PDBGUID, ii.PDBAge, ii.PDBPath
			}
		}
		data.Modules = append(data.Modules, mm)
	}
	ts, err := win.Threads(uint32(pid), nil)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	type th struct {
		tid       uint32
		h         win.Handle
		suspended bool
		teb       uint64
	}
	threads := make([]th, 0, len(ts))
	defer func() {
		for _, t := range threads {
			if t.suspended {
				win.ResumeThread(t.h)
			}
			win.CloseHandle(t.h)
		}
	}()
	for _, x := range ts {
		h, err := win.OpenThread(x.Tid)
		if err != nil {
			continue // exited since the list was taken
		}
		teb, _ := win.ThreadTEB(h)
		threads = append(threads, th{tid: x.Tid, h: h, teb: teb})
	}
	// Stop every thread first, so that the stacks are of one moment.
	t0 := time.Now()
	for i := range threads {
		threads[i].suspended = win.SuspendThread(threads[i].h) == nil
	}
	for _, t := range threads {
		if !t.suspended {
			continue
		}
		ctx := make([]byte, winunwind.ContextSize)
		binary.LittleEndian.PutUint32(ctx[0x30:], winunwind.ContextControl|winunwind.ContextInteger|winunwind.ContextFloatingPoint)
		if err := win.GetThreadContext(t.h, ctx); err != nil {
			continue
		}
		td := MinidumpThreadData{Tid: t.tid, Teb: t.teb, Context: ctx, Name: win.ThreadName(t.h)}
		sp := binary.LittleEndian.Uint64(ctx[0x98:])
		size := uint64(maxLiveStack)
		var base [8]byte
		if t.teb != 0 && win.ReadMemory(proc, t.teb+8, base[:]) == nil {
			if top := binary.LittleEndian.Uint64(base[:]); top > sp && top-sp < size {
				size = top - sp
			}
		}
		buf := make([]byte, size)
		if win.ReadMemory(proc, sp, buf) != nil {
			// Not the thread's own stack (a fiber, a Go goroutine stack):
			// copy to the end of the page at least.
			buf = buf[:4096-sp%4096]
			if win.ReadMemory(proc, sp, buf) != nil {
				buf = nil
			}
		}
		td.Stack = MinidumpMemory{Start: sp, Data: buf}
		data.Threads = append(data.Threads, td)
	}
	for i := range threads {
		if threads[i].suspended {
			win.ResumeThread(threads[i].h)
			threads[i].suspended = false
		}
	}
	stopped := time.Since(t0)
	var b bytes.Buffer
	if err := WriteMinidump(&b, data); err != nil {
		return nil, err
	}
	d, err := NewMinidump(bytes.NewReader(b.Bytes()), int64(b.Len()), fmt.Sprintf("pid %d", pid))
	if err != nil {
		return nil, err
	}
	d.stopped = stopped
	return d, nil
}
