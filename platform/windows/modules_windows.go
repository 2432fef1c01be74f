//go:build windows && amd64

package windows

import (
	"encoding/binary"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/arch/winunwind"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/win"
)

type dllEvent struct {
	win.DLLEvent
	time int64
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// stackMem is a thread's stack copy; unlike arch.StackCopy it reports a
// read outside the copy — how every unwind ends — with the bare sentinel,
// without formatting an error.
type stackMem struct {
	addr uint64
	data []byte
}

func (s *stackMem) ReadMemory(addr uint64, p []byte) error {
	if addr < s.addr || addr-s.addr > uint64(len(s.data)) || uint64(len(p)) > uint64(len(s.data))-(addr-s.addr) {
		return arch.ErrBadAddress
	}
	copy(p, s.data[addr-s.addr:])
	return nil
}

// memImage reads a loaded image by RVA from the target's memory through
// ReadProcessMemory (which fails cleanly where memory is gone, unlike a
// direct read), caching 4 KiB pages: headers, .pdata, .xdata and code do
// not change while the image is loaded.
type memImage struct {
	proc  win.Handle
	base  uint64
	size  uint64
	pages map[uint32][]byte
}

const imgPage = 4096

func (m *memImage) ReadRVA(rva uint32, p []byte) error {
	if uint64(rva)+uint64(len(p)) > m.size {
		return &ImageError{RVA: rva, Msg: "past the end of the image"}
	}
	for len(p) > 0 {
		pg := rva &^ (imgPage - 1)
		b, ok := m.pages[pg]
		if !ok {
			b = make([]byte, imgPage)
			if err := win.ReadMemory(m.proc, m.base+uint64(pg), b); err != nil {
				return &ImageError{RVA: rva, Msg: err.Error()}
			}
			if m.pages == nil {
				m.pages = map[uint32][]byte{}
			}
			m.pages[pg] = b
		}
		n := copy(p, b[rva-pg:])
		p = p[n:]
		rva += uint32(n)
	}
	return nil
}

// applyModules compares a loader list with the modules known and reports
// the differences. Out of process it runs periodically; in process once,
// after the DLL notification is registered.
func (s *Session) applyModules(ms []win.Module, err error, now int64) {
	if err != nil {
		return // e.g. a process created suspended has no loader list yet
	}
	for _, m := range s.mods {
		m.seen = false
	}
	changed := false
	for _, x := range ms {
		if m := s.mods[x.Base]; m != nil && m.path == x.Path {
			m.seen = true
			continue
		}
		if m := s.mods[x.Base]; m != nil {
			s.unloadModule(m, now)
		}
		s.loadModule(x.Base, x.Size, x.Path, now)
		changed = true
	}
	if !s.self {
		for _, m := range s.mods {
			if !m.seen {
				s.unloadModule(m, now)
				changed = true
			}
		}
	}
	if changed {
		s.rebuildUnwinder()
	}
}

// findModule returns the module holding pc.
func (s *Session) findModule(pc uint64) *module {
	for _, m := range s.mods {
		if pc-m.base < m.size {
			return m
		}
	}
	return nil
}

// dllEvent runs on the loading thread, under the loader lock: it only
// queues the event with its time.
func (s *Session) dllEvent(e win.DLLEvent) {
	t := s.now()
	s.dllMu.Lock()
	s.dllQ = append(s.dllQ, dllEvent{e, t})
	s.dllMu.Unlock()
	s.dllN.Add(1)
}

func (s *Session) drainDLLs() {
	s.dllMu.Lock()
	q := s.dllQ
	s.dllQ = nil
	s.dllN.Store(0)
	s.dllMu.Unlock()
	for _, x := range q {
		e, now := x.DLLEvent, x.time
		switch e.Reason {
		case win.DLLLoaded:
			if m := s.mods[e.Base]; m != nil {
				if m.path == e.Path {
					continue
				}
				s.unloadModule(m, now)
			}
			s.loadModule(e.Base, e.Size, e.Path, now)
		case win.DLLUnloaded:
			if m := s.mods[e.Base]; m != nil {
				s.unloadModule(m, now)
			}
		}
	}
	s.rebuildUnwinder()
}

// loadModule reads an image's identity and unwind table from memory and
// reports it.
func (s *Session) loadModule(base, size uint64, path string, now int64) {
	img := &memImage{proc: s.proc, base: base, size: size}
	ii, err := ReadImageInfo(img.ReadRVA)
	ml := format.ModuleLoad{Time: now, Pid: s.pid, Base: base, Size: size, Kind: format.ModulePE, Path: path}
	m := &module{base: base, size: size, path: path, img: img, seen: true}
	if err == nil {
		if ii.SizeOfImage != 0 && uint64(ii.SizeOfImage) <= size+imgPage {
			img.size = uint64(ii.SizeOfImage)
			m.size, ml.Size = img.size, img.size
		}
		ml.TimeDateStamp, ml.SizeOfImage = ii.TimeDateStamp, ii.SizeOfImage
		if ii.HasCodeView {
			ml.PDBGUID, ml.PDBAge, ml.PDBPath = ii.PDBGUID, ii.PDBAge, ii.PDBPath
		}
		if ii.ExceptionSize >= 12 {
			b := make([]byte, ii.ExceptionSize/12*12)
			if img.ReadRVA(ii.ExceptionRVA, b) == nil {
				if fns, err := winunwind.ParseFunctionTable(b); err == nil {
					m.uw = &winunwind.Module{Base: base, Size: m.size, Functions: fns, Image: img}
				}
			}
		}
	}
	s.nextMod++
	m.id = s.nextMod
	ml.ID = m.id
	s.mods[base] = m
	s.h.ModuleLoad(&ml)
}

func (s *Session) unloadModule(m *module, now int64) {
	delete(s.mods, m.base)
	s.h.ModuleUnload(&format.ModuleUnload{Time: now, Pid: s.pid, ID: m.id})
}

// rebuildUnwinder makes a new unwinder over the modules with unwind data;
// modules change rarely.
func (s *Session) rebuildUnwinder() {
	u := &winunwind.Unwinder{}
	for _, m := range s.mods {
		if m.uw != nil {
			u.Add(m.uw)
		}
	}
	s.unw = u
}
