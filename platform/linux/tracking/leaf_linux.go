//go:build linux

package tracking

import (
	"debug/elf"
	"os"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/hotspot"
	"github.com/rawstack/rawstack/platform/linux/procfs"
	v8 "github.com/rawstack/rawstack/platform/linux/v8"
)

// leafWindow is the stack --unwind auto copies with each sample of a
// program that keeps frame pointers: enough for the sampled function's
// return address (at most its frame above the stack pointer), a sixteenth
// of DWARF mode's 8 KiB.
const leafWindow = 512

// ChooseAuto decides, once the target's executable is known, how
// --unwind auto samples it. A program that keeps frame pointers (Go
// without cgo, -fno-omit-frame-pointer builds) gets the kernel's frame-pointer chain
// plus its user registers and a small stack window, from which the CFI
// row of the sampled PC recovers the one frame frame pointers miss
// (repairLeaf). A program without them (Debian's python3, most -O2 C)
// gets what --unwind dwarf does: registers and 8 KiB of stack, unwound
// with CFI, frame pointers where modules keep them.
func (uw *Unwinder) ChooseAuto(pid int) {
	if uw == nil || !uw.auto || uw.keepRaw {
		return
	}
	exe := procfs.Dir(pid) + "/exe"
	real, err := os.Readlink(exe)
	if err != nil {
		return
	}
	uf, fp := uw.exeKeepsFP(exe, real)
	if uf == nil {
		return // DWARF-style sampling works without knowing
	}
	if fp {
		uw.leaf = true
		if !uw.sizeSet && !v8.MaybeV8(real) && !hotspot.MaybeJava(real) { // V8's and HotSpot's frames are read from the copy (v8_linux.go, hotspot_linux.go)
			uw.size = leafWindow
		}
	} else if uf.table != nil {
		// openFile would build the same table again when the first
		// sample passes through the executable.
		uw.exePath, uw.exeFile = real, uf
	}
}

// exeKeepsFP opens the executable at path (named real in errors) and
// returns its unwind table and whether it keeps frame pointers; nil if
// it cannot be read.
func (uw *Unwinder) exeKeepsFP(path, real string) (*unwindFile, bool) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, false
	}
	uf := &unwindFile{f: f}
	uf.table, _ = arch.NewLazyTableELF(f, real)
	// A Go program with no C in it (no .eh_frame: the Go linker writes
	// .debug_frame, C objects bring .eh_frame) keeps frame pointers in
	// every function that calls, and the kernel's walk crosses the
	// runtime's stack switches through them; its CFI, all from the stack
	// pointer, would have it taken for one without.
	goOnly := f.Section(".gopclntab") != nil && f.Section(".eh_frame") == nil
	f.Close()
	return uf, goOnly || keepsFramePointers(uw.arch, uf.table)
}

// repairLeaf completes a --unwind auto sample of a frame-pointer program:
// the kernel's callchain (user part included) joined with the caller of
// the sampled function when that function had not linked its frame.
func (uw *Unwinder) repairLeaf(s *Tracker, r *record, sm *platform.Sample) bool {
	if r.UserABI == 0 || len(r.UserRegs) == 0 || uw.regs.SetPerf(uw.arch, uw.mask, r.UserRegs) != nil {
		return true // a kernel thread: the callchain as it is
	}
	pc := uw.regs.PC()
	pcs := sm.PCs
	u := -1
	for i, x := range pcs {
		if x == pc {
			u = i
			break
		}
	}
	if u < 0 {
		return true
	}
	uw.mem = arch.StackCopy{Addr: uw.regs.SP(), Data: r.UserStack}
	p := uw.proc(s, sm.Pid)
	rule := p.rule(pc)
	if rule.CFA == arch.CFANone && len(p.lazy) > 0 && uw.loadFor(s, p, sm.Pid, pcs[u:u+1]) {
		rule = p.rule(pc)
	}
	ra, unlinked, ok := arch.LeafCaller(rule, &uw.regs, &uw.mem)
	if !ok || !unlinked || p.code.Find(ra) == nil {
		return true
	}
	out := append(uw.pcs[:0], pcs[:u+1]...)
	out = append(out, ra)
	out = append(out, pcs[u+1:]...)
	uw.pcs = out
	sm.PCs = out
	return true
}
