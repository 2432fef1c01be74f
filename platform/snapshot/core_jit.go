package snapshot

import (
	"debug/elf"
	"errors"
	"fmt"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform/linux/hotspot"
	"github.com/rawstack/rawstack/platform/linux/v8"
)

// readJIT gives the threads of a core of a Node.js process their
// JavaScript frames, named from V8's metadata, and those of a core of a
// JVM their Java frames, named from HotSpot's serviceability tables: the
// readers a live snapshot uses (platform/linux/v8, platform/linux/hotspot),
// reading the memory the core holds, and the mapped files' pages where
// the core left them out (mem). The runtime's heap, code space and
// stacks are anonymous or written memory, which a core keeps (the
// kernel's default coredump_filter and gcore do); its layout comes from
// the node executable or libjvm.so the core maps, found through resolve.
// A core that lacks a page a frame needs leaves that frame native, as a
// read that fails in a live process does. A runtime found but not read
// (an unknown version, a stripped libjvm) is returned as an error, one a
// file, for the caller to print.
func (c *CoreFile) readJIT(snap *Snapshot, maps []mapping, resolve func(string) string, mem *pageCache) []error {
	read := func(_ uint32, addr uint64, b []byte) bool { return mem.ReadMemory(addr, b) == nil }
	pid := uint32(snap.Pid)
	// JIT code is executable memory no file backs (CoreFile.maps).
	anon := func(pc uint64) bool {
		for _, m := range maps {
			if pc >= m.Start && pc < m.End {
				return m.Path == "" && m.Exec()
			}
		}
		return false
	}
	var errs []error
	js := v8.NewReader(read)
	hs := hotspot.NewReader(read)
	hs.Frozen = true
	for _, m := range maps {
		if !m.Exec() || m.Path == "" {
			continue
		}
		switch {
		case v8.MaybeV8(m.Path):
			file := resolve(m.Path)
			if file == "" {
				continue
			}
			l, err := v8.Load(file, m.Path)
			if err != nil {
				if !v8.IsNotV8(err) {
					errs = append(errs, err)
				}
				continue
			}
			if !js.Attached(pid) {
				js.Attach(pid, l, anon)
			}
			js.AddText(pid, m.Start, m.End)
		case hotspot.IsLibJVM(m.Path) && !hs.Attached(pid):
			if snap.Arch != arch.AMD64 {
				// The walk knows x86-64's frames, as in a live process.
				errs = append(errs, fmt.Errorf("hotspot: %s: Java frames are read on x86-64 only, not %v: %w", m.Path, snap.Arch, hotspot.ErrUnknownVersion))
				continue
			}
			file := resolve(m.Path)
			if file == "" {
				continue
			}
			syms, bias, err := libjvmSymbols(file, m)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			hs.Attach(pid, m.Path, syms.Rebase(bias), nil)
		}
	}
	nameJIT(snap, js, hs)
	if err := hs.Err(pid); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// libjvmSymbols reads the serviceability symbols of the libjvm.so at file
// and its load bias with its executable segment mapped at m.
func libjvmSymbols(file string, m mapping) (hotspot.Symbols, uint64, error) {
	f, err := elf.Open(file)
	if err != nil {
		return hotspot.Symbols{}, 0, fmt.Errorf("hotspot: %w", err)
	}
	defer f.Close()
	syms, err := hotspot.FileSymbols(f, m.Path)
	if err != nil {
		return syms, 0, err
	}
	if bias, ok := hotspot.TextBias(f, m.Start); ok {
		return syms, bias, nil
	}
	return syms, 0, errors.New("hotspot: " + m.Path + ": no executable segment")
}

// jsFrames names the frames of a thread of a V8 process (v8's Reader,
// or its Sampling of a live process).
type jsFrames interface {
	Attached(pid uint32) bool
	Frames(pid uint32, regs v8.Regs, st v8.Stack, pcs []uint64) ([]format.JITFrame, []format.JITFunc)
}

// javaFrames names the frames of a thread of a JVM (hotspot's Reader, or
// its Sampling of a live process).
type javaFrames interface {
	Attached(pid uint32) bool
	Frames(pid uint32, regs hotspot.Regs, st hotspot.Stack, pcs []uint64) ([]format.JITFrame, []format.JITFunc, []uint64)
}

// nameJIT gives the threads of snap, whose stacks are unwound, the
// JavaScript frames js names and the Java frames hs names (either may be
// nil), reading the process's stacks through them.
func nameJIT(snap *Snapshot, js jsFrames, hs javaFrames) {
	pid := uint32(snap.Pid)
	if js != nil && js.Attached(pid) {
		for i := range snap.Threads {
			t := &snap.Threads[i]
			if t.Err != nil {
				continue
			}
			frames, fresh := js.Frames(pid, v8.Regs{PC: t.Regs.PC(), SP: t.Regs.SP(), FP: t.Regs.FP()}, v8.Stack{Live: true}, t.PCs)
			t.JIT = append([]format.JITFrame(nil), frames...)
			snap.JITFuncs = append(snap.JITFuncs, fresh...)
		}
	}
	if hs != nil && hs.Attached(pid) {
		for i := range snap.Threads {
			t := &snap.Threads[i]
			if t.Err != nil {
				continue
			}
			frames, fresh, walk := hs.Frames(pid, hotspot.Regs{PC: t.Regs.PC(), SP: t.Regs.SP(), FP: t.Regs.FP()}, hotspot.Stack{Live: true}, t.PCs)
			t.JIT = append(t.JIT, frames...)
			snap.JITFuncs = append(snap.JITFuncs, fresh...)
			if len(frames) > 0 && len(walk) > len(t.PCs) {
				// Compiled Java code keeps no frame pointers: the walk
				// went on where the native unwind stopped.
				t.PCs = append(t.PCs[:0:0], walk...)
			}
		}
	}
}
