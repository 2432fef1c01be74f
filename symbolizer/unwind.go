package symbolizer

import (
	"bytes"
	"debug/elf"
	"fmt"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// rawUnwinder unwinds RawStack events (registers plus a copy of the
// stack) offline, with arch's DWARF CFI unwinder where a module's
// .eh_frame/.debug_frame covers the PC and frame pointers elsewhere.
type rawUnwinder struct {
	u      *arch.Unwinder
	tables map[fileKey]*fileCFI
	mods   map[uint32]*pidUnwind
	pcs    []uint64
	regs   arch.Regs
}

// fileCFI is a module file's unwind table and program headers.
type fileCFI struct {
	table *arch.Table // nil: unwind with frame pointers
	f     *elf.File   // for load biases; nil if the file is missing
}

type pidUnwind struct {
	gen uint64
	ms  *arch.Modules
	// code is every module of any kind (JIT and anonymous code too):
	// the unwinder's Code.
	code func(addr uint64) bool
}

func (b *builder) rawStack(ev *format.RawStack) {
	b.p.RawStacks++
	b.span(ev.Time)
	if b.raw == nil {
		b.raw = &rawUnwinder{u: arch.NewUnwinder(nil), tables: map[fileKey]*fileCFI{}, mods: map[uint32]*pidUnwind{}}
	}
	ru := b.raw
	a := arch.Arch(b.p.Header.Arch)
	if err := ru.regs.SetMasked(a, ev.RegMask, ev.Regs); err != nil {
		b.opts.warn(err)
		return
	}
	ru.u.Modules = ru.modules(b, ev.Pid, ev.Time)
	ru.u.Code = ru.mods[ev.Pid].code
	mem := &arch.StackCopy{Addr: ev.StackAddr, Data: ev.Data}
	ru.u.Chain = nil
	if ev.Chain != 0 {
		ru.u.Chain = b.stacks[ev.Chain]
	}
	ru.pcs = ru.u.Unwind(&ru.regs, mem, ru.pcs[:0])
	if b.anyJITCandidate(ev.Pid, ru.pcs, ev.Time) {
		b.deferRaw(ev, ru.pcs)
		return
	}
	var locs []int
	// Kernel frames come first, nearer the leaf (format/SPEC.md §6.9).
	if ev.Kernel != 0 {
		for _, pc := range b.stacks[ev.Kernel] {
			locs = append(locs, b.loc(ev.Pid, pc, len(locs) > 0, ev.Time))
		}
	}
	for _, pc := range ru.pcs {
		locs = append(locs, b.loc(ev.Pid, pc, len(locs) > 0, ev.Time))
	}
	b.addGo(locs, ev.Weight, ev.Flags, 0, 0, ev.Python)
	if b.tl != nil {
		b.tl.sample(ev.Time, ev.Pid, ev.Tid, ev.Weight, ev.Flags, locs, ev.Python, 0)
	}
}

// modules returns the unwinder's view of process pid at time t, rebuilt
// when the process's modules change.
func (ru *rawUnwinder) modules(b *builder, pid uint32, t int64) *arch.Modules {
	gen := b.db.Generation(pid)
	if pm := ru.mods[pid]; pm != nil && pm.gen == gen {
		return pm.ms
	}
	ms, code := &arch.Modules{}, &arch.Modules{}
	if p := b.db.byPid[pid]; p != nil {
		for _, m := range p.mods {
			if m.Time > t || t >= m.Unload {
				continue
			}
			code.Add(arch.Module{Start: m.Base, End: m.Base + m.Size})
			if m.Kind != format.ModuleELF && m.Kind != format.ModuleUnknown {
				continue
			}
			fc := ru.file(m, b.opts)
			am := arch.Module{Start: m.Base, End: m.Base + m.Size}
			if fc.f != nil {
				if bias, err := arch.LoadBias(fc.f, m.Base, m.FileOffset); err == nil {
					am.Bias, am.Table = bias, fc.table
				}
			}
			ms.Add(am)
		}
	}
	pu := &pidUnwind{gen: gen, ms: ms}
	if code.Len() > 0 { // no modules known: no way to tell code
		pu.code = func(addr uint64) bool { return code.Find(addr) != nil }
	}
	ru.mods[pid] = pu
	return ms
}

func (ru *rawUnwinder) file(m *Module, opts *Options) *fileCFI {
	k := keyOf(m)
	if fc, ok := ru.tables[k]; ok {
		return fc
	}
	fc := &fileCFI{}
	path := opts.MapPath(m.Path)
	if f, err := elf.Open(path); err == nil {
		// A rebuilt file has other unwind rules: use it only if its build
		// id is the recorded one (or none was recorded).
		if id := locate.BuildID(f); len(m.BuildID) > 0 && len(id) > 0 && !bytes.Equal(id, m.BuildID) {
			opts.warn(fmt.Errorf("symbolizer: %s: build id %x, recorded %x: not used for unwinding", path, id, m.BuildID))
			f.Close()
		} else {
			fc.f = f // kept open for the run: the set of files is small
			if t, err := arch.NewTableELF(f, path); err == nil {
				fc.table = t
			}
		}
	}
	ru.tables[k] = fc
	return fc
}

func (ru *rawUnwinder) close() {
	if ru == nil {
		return
	}
	for _, fc := range ru.tables {
		if fc.f != nil {
			fc.f.Close()
		}
	}
}
