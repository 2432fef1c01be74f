package arch

import (
	"debug/elf"
	"encoding/binary"
	"sort"

	"github.com/rawstack/rawstack/internal/gopclntab"
)

// This file holds what an unwinder knows of Go code beyond its CFI: Go
// keeps frame pointers, and its runtime switches stacks.
//
// Go's .debug_frame describes the CFA and the return address but not the
// frame pointer the prologue saves, so CFI alone leaves a caller's frame
// pointer unknown (and an unwinder that keeps the callee's value carries
// a wrong one up the stack). The layout is fixed by the compiler: on
// amd64 "push rbp; mov rbp, rsp" at entry, the saved rbp 16 bytes below
// the CFA; on arm64 the frame pointer is stored 8 bytes below the saved
// link register at the frame's bottom.
//
// The runtime switches stacks in a few assembly functions, the ones the
// linker flags SPWRITE in the pclntab: systemstack and asmcgocall (the
// goroutine's stack to the thread's g0 stack), the vDSO callers
// (nanotime1, time.now), cgocallback, mcall, morestack, gogo. Their CFI
// describes the frame on the stack they entered on, so from the far side
// of the switch it reads garbage. Those that keep a frame pointer
// (systemstack, asmcgocall, the vDSO callers, mcall: "push rbp" at entry)
// keep it pointing at their frame on the goroutine's stack while they
// run on the other: the runtime's own traceback crosses systemstack that
// way (through g.sched), and so does a frame-pointer walk. A table marks
// their rows Switch, and the unwinder steps them by the frame pointer,
// letting the stack pointer jump. mcall zeroes the frame pointer before
// it calls into the scheduler: the goroutine that called it has given up
// its thread, and the g0 stack ends there, as in the runtime's traceback
// and in runtime/pprof. morestack and gogo keep no frame.
//
// runtime.sigreturn__sigaction is the restorer of Go's signal handlers
// (sigtramp, on the gsignal stack): the kernel's signal frame lies above
// it as above glibc's __restore_rt, which its CFI says and Go's does not.

// Go reports whether t is a Go binary's, with the Go part described above.
func (t *Table) Go() bool { return t != nil && t.gort != nil }

// goRuntime is a Go binary's part of a table, in link-time addresses.
type goRuntime struct {
	text     [2]uint64   // Go's code: the pclntab's functions
	switches [][2]uint64 // SPWRITE functions that keep a frame pointer, sorted
	back     [2]uint64   // runtime.cgocallback, one of them
	rows     []Stub      // cgocallback's and systemstack_switch's rows from the pclntab
	stops    [][2]uint64 // SPWRITE functions that keep none: outermost as callers
	sigret   [2]uint64   // runtime.sigreturn__sigaction
}

// maxPclntab caps the .gopclntab a table reads (a large Go binary's is
// tens of MiB).
const maxPclntab = 1 << 30

// goRuntimeELF returns f's Go part, or nil when f is not a Go binary (or
// its table is unreadable: the module is then unwound as any other).
// file, if not nil, is f mapped in memory: the pclntab is read there in
// place (see gopclntab.ParseELFIn), where a copy would be garbage of
// several MiB for every Go binary a whole-host session unwinds.
func goRuntimeELF(f *elf.File, a Arch, file []byte) *goRuntime {
	tab, _, err := gopclntab.ParseELFIn(f, file, maxPclntab)
	if err != nil {
		return nil
	}
	g := &goRuntime{}
	g.text[0], g.text[1] = tab.Text()
	if g.text[0] >= g.text[1] {
		return nil
	}
	tab.Funcs(gopclntab.FlagAsm|gopclntab.FlagSPWrite, func(fn gopclntab.FuncRange) bool {
		if fn.Name == "runtime.cgocallback" || fn.Name == "runtime.systemstack_switch" {
			// The frames the goroutine's side of a C-to-Go call is
			// unwound through (SwitchBack): a release binary (-s -w)
			// has no CFI for them, and the pclntab has their frame
			// sizes.
			g.rows = append(g.rows, spRows(tab, a, fn.Entry)...)
		}
		switch {
		case fn.Name == "runtime.sigreturn__sigaction":
			g.sigret = [2]uint64{fn.Entry, fn.End}
		case fn.Flag&gopclntab.FlagSPWrite != 0 && keepsFrame(f, a, fn.Entry):
			g.switches = append(g.switches, [2]uint64{fn.Entry, fn.End})
			if fn.Name == "runtime.cgocallback" {
				g.back = [2]uint64{fn.Entry, fn.End}
			}
		case fn.Flag&gopclntab.FlagSPWrite != 0:
			g.stops = append(g.stops, [2]uint64{fn.Entry, fn.End})
		}
		return true
	})
	return g
}

// spRows returns the rows of the function at entry from its pcsp table:
// what Go's .debug_frame says of it, for a release binary (-s -w) that
// has none. The return address is at the CFA-8 on amd64, in the link
// register or at the frame's bottom on arm64.
func spRows(tab *gopclntab.Table, a Arch, entry uint64) []Stub {
	var rows []Stub
	tab.SPDeltas(entry, func(start, end uint64, d int64) bool {
		r := Rule{CFA: CFAReg, CFAReg: uint8(a.SP()), FP: RegSame}
		switch a {
		case AMD64:
			r.CFAOff, r.RA, r.RAOff = int32(d+8), RegOffset, -8
		case ARM64:
			r.CFAOff, r.RA = int32(d), RegSame
			if d > 0 {
				r.RA, r.RAOff = RegOffset, int32(-d)
			}
		}
		rows = append(rows, Stub{Start: start, End: end, Rule: r})
		return len(rows) < 64
	})
	return rows
}

// in reports whether addr lies in one of the sorted ranges rs.
func in(rs [][2]uint64, addr uint64) bool {
	i := sort.Search(len(rs), func(i int) bool { return rs[i][1] > addr })
	return i < len(rs) && addr >= rs[i][0]
}

// keepsFrame reports whether the function at entry starts by linking a
// frame record: "push rbp; mov rbp, rsp" on amd64; on arm64 "sub x29,
// sp, #8" (Go's frame pointer, below the saved link register) among its
// first four instructions.
func keepsFrame(f *elf.File, a Arch, entry uint64) bool {
	var code [16]byte
	if !readVaddr(f, entry, code[:]) {
		return false
	}
	switch a {
	case AMD64:
		return code[0] == 0x55 && code[1] == 0x48 && code[2] == 0x89 && code[3] == 0xe5
	case ARM64:
		for i := 0; i < 16; i += 4 {
			if binary.LittleEndian.Uint32(code[i:]) == 0xd10023fd {
				return true
			}
		}
	}
	return false
}

// readVaddr reads f's bytes at a link-time virtual address.
func readVaddr(f *elf.File, addr uint64, p []byte) bool {
	for _, pr := range f.Progs {
		if pr.Type != elf.PT_LOAD || addr < pr.Vaddr || addr-pr.Vaddr+uint64(len(p)) > pr.Filesz {
			continue
		}
		_, err := pr.ReadAt(p, int64(addr-pr.Vaddr))
		return err == nil
	}
	return false
}

// goSigreturnAMD64 is the signal frame above Go's restorer, as glibc's
// CFI gives it for __restore_rt: the stack pointer points at the
// ucontext, whose sigcontext holds the interrupted registers (Linux
// x86-64: r8 at +40 … r15 at +96, rbp +120, rbx +128, rsp +160, rip +168).
var goSigreturnAMD64 = Rule{
	CFA: CFADeref, CFAReg: AMD64RSP, CFAOff: 160,
	RA: RegAtSP, RAOff: 168, FP: RegAtSP, FPOff: 120,
	Signal: true, SavedAtSP: true,
	Saved:    [MaxSaved]int8{128 / 8, 72 / 8, 80 / 8, 88 / 8, 96 / 8},
	SavedSet: 0b11111,
}

// adjust returns r, the CFI rule at the link-time address addr, with
// what Go's CFI leaves out.
func (g *goRuntime) adjust(a Arch, addr uint64, r Rule) Rule {
	if addr < g.text[0] || addr >= g.text[1] {
		return r
	}
	if a == AMD64 && addr >= g.sigret[0] && addr < g.sigret[1] {
		return goSigreturnAMD64
	}
	r.Go = true
	if r.CFA == CFANone {
		for _, st := range g.rows {
			if addr >= st.Start && addr < st.End {
				r = st.Rule
				r.Go = true
				break
			}
		}
	}
	if in(g.stops, addr) {
		// Its caller lies on the stack it left (morestack, gogo: no
		// frame record to follow): the end of this stack, as in the
		// runtime's traceback. Innermost, its row still serves.
		r.SwitchStop = true
	}
	if r.CFA == CFAReg && r.FP == RegSame && int(r.CFAReg) == a.SP() {
		switch a {
		case AMD64:
			if r.CFAOff >= 16 {
				r.FP, r.FPOff = RegOffset, -16
			}
		case ARM64:
			if r.RA == RegOffset && r.CFAOff > 0 {
				r.FP, r.FPOff = RegOffset, r.RAOff-8
			}
		}
	}
	if in(g.switches, addr) {
		r.Switch = true
		r.SwitchBack = addr >= g.back[0] && addr < g.back[1]
	}
	return r
}
