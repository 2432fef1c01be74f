package goroutines

import (
	"cmp"
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/go-delve/delve/pkg/goversion"
	"github.com/go-delve/delve/service/api"
	"github.com/rawstack/rawstack/platform/linux"
	"github.com/rawstack/rawstack/symbolizer/gopclntab"
)

// Reading the runtime's structures directly
//
// A live process is read without delve: the runtime's allgs, each g's
// status, wait reason, sched (pc, sp, bp, lr), gopc, startpc, m and
// labels are read from the copied pages at the offsets the executable's
// DWARF gives (platform/linux's goroutine reader, which sampling uses
// for goroutine ids and labels, finds them), and each stack is unwound
// with the Go pclntab (its pcsp table, as the runtime's own traceback
// does) and named from it, inlined calls as frames of their own. That
// costs what reading the g's and their stacks costs: no debug-info load
// of the whole binary, and memory in proportion to the goroutines.

// rtLayout is where the runtime keeps what a goroutine listing needs.
type rtLayout struct {
	gSize                                       uint64
	goid, status, waitReason, waitSince         uint64
	schedSP, schedPC, schedBP, schedLR          uint64
	gopc, startpc, m, stackLo, stackHi          uint64
	syscallSP, syscallPC                        uint64
	mProcID, mCurG                              uint64
	hasWaitReason, hasWaitSince, hasSyscall, lr bool
}

func rtLayoutOf(exe string) (*rtLayout, error) {
	ms, sizes, err := linux.GoStructMembers(exe, "runtime.g", "runtime.gobuf", "runtime.m", "runtime.stack")
	if err != nil {
		return nil, err
	}
	g, buf, m, st := ms["runtime.g"], ms["runtime.gobuf"], ms["runtime.m"], ms["runtime.stack"]
	l := &rtLayout{gSize: sizes["runtime.g"]}
	need := func(m map[string]uint64, name string, dst *uint64) bool {
		v, ok := m[name]
		*dst = v
		return ok
	}
	var sched, stack uint64
	ok := need(g, "goid", &l.goid) && need(g, "atomicstatus", &l.status) && need(g, "sched", &sched) &&
		need(g, "gopc", &l.gopc) && need(g, "startpc", &l.startpc) && need(g, "m", &l.m) && need(g, "stack", &stack) &&
		need(buf, "sp", &l.schedSP) && need(buf, "pc", &l.schedPC) && need(buf, "bp", &l.schedBP) &&
		need(m, "procid", &l.mProcID) && need(m, "curg", &l.mCurG) &&
		need(st, "lo", &l.stackLo) && need(st, "hi", &l.stackHi)
	if !ok || l.gSize == 0 || l.gSize > 1<<16 {
		return nil, fmt.Errorf("%s: DWARF: runtime.g, gobuf, m or stack lack a field this reader needs", exe)
	}
	l.schedSP += sched
	l.schedPC += sched
	l.schedBP += sched
	if lr, ok := buf["lr"]; ok {
		l.schedLR, l.lr = sched+lr, true
	}
	l.stackLo += stack
	l.stackHi += stack
	l.waitReason, l.hasWaitReason = g["waitreason"]
	l.waitSince, l.hasWaitSince = g["waitsince"]
	var ok1, ok2 bool
	l.syscallSP, ok1 = g["syscallsp"]
	l.syscallPC, ok2 = g["syscallpc"]
	l.hasSyscall = ok1 && ok2
	return l, nil
}

// memory reads the target's memory at an address; false: not readable.
type memory func(addr uint64, p []byte) bool

// threadRegs are a stopped thread's registers, as an unwinder needs them.
type threadRegs struct {
	tid            int
	pc, sp, bp, lr uint64
}

// exeInfo is what is read from the executable before the target stops.
type exeInfo struct {
	path       string
	layout     *rtLayout
	tab        *gopclntab.Table
	allgs      uint64 // address of runtime.allgs (a slice header)
	goVersion  string
	ver        goversion.GoVersion
	arm64      bool
	readFile   memory // the executable's file-backed memory, by address
	pie        bool
	lowestLoad uint64
}

// openExe reads the layout, the pclntab and the symbols of exe.
func openExe(exe string) (*exeInfo, error) {
	bi, err := buildinfo.ReadFile(exe)
	if err != nil {
		return nil, &BinaryError{Path: exe, Err: ErrNotGo}
	}
	f, err := elf.Open(exe)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	x := &exeInfo{path: exe, goVersion: bi.GoVersion, arm64: f.Machine == elf.EM_AARCH64, pie: f.Type == elf.ET_DYN}
	if v, ok := goversion.Parse(bi.GoVersion); ok {
		x.ver = v
	}
	if x.layout, err = rtLayoutOf(exe); err != nil {
		return nil, err
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: symbol table: %w", exe, err)
	}
	for _, s := range syms {
		if s.Name == "runtime.allgs" {
			x.allgs = s.Value
			break
		}
	}
	if x.allgs == 0 {
		return nil, fmt.Errorf("%s: no runtime.allgs symbol", exe)
	}
	// The file's loadable segments, for what the copy leaves to the
	// file (read-only data: constant label strings).
	type seg struct {
		vaddr uint64
		data  []byte
	}
	var segs []seg
	x.lowestLoad = ^uint64(0)
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		x.lowestLoad = min(x.lowestLoad, p.Vaddr)
		if p.Flags&elf.PF_W != 0 || p.Filesz > 1<<30 {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return nil, fmt.Errorf("%s: segment at %#x: %w", exe, p.Vaddr, err)
		}
		segs = append(segs, seg{p.Vaddr, b})
	}
	x.readFile = func(addr uint64, p []byte) bool {
		for _, s := range segs {
			if addr >= s.vaddr && addr-s.vaddr <= uint64(len(s.data)) && uint64(len(p)) <= uint64(len(s.data))-(addr-s.vaddr) {
				copy(p, s.data[addr-s.vaddr:])
				return true
			}
		}
		return false
	}
	sec := f.Section(".gopclntab")
	if sec == nil {
		return nil, fmt.Errorf("%s: no .gopclntab", exe)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: .gopclntab: %w", exe, err)
	}
	var text uint64
	if ts := f.Section(".text"); ts != nil {
		text = ts.Addr
	}
	if x.tab, err = gopclntab.Parse(data, f.ByteOrder, text, 0, nil); err != nil {
		return nil, fmt.Errorf("%s: .gopclntab: %w", exe, err)
	}
	// Inlined frames need go:func.*, found through the runtime's
	// moduledata in a writable section.
	for _, d := range f.Sections {
		if d.Flags&elf.SHF_WRITE == 0 || d.Flags&elf.SHF_ALLOC == 0 || d.Type == elf.SHT_NOBITS || d.Size > 64<<20 {
			continue
		}
		b, err := d.Data()
		if err != nil {
			continue
		}
		if g, ok := x.tab.FindGoFunc(sec.Addr, b); ok {
			if t, err := gopclntab.Parse(data, f.ByteOrder, text, g, x.readFile); err == nil {
				x.tab = t
			}
			break
		}
	}
	return x, nil
}

// readDirect lists the goroutines of a stopped (or copied) Go process
// whose memory mem reads (bias: where a position-independent executable
// was loaded, 0 otherwise) and whose threads were stopped with regs.
func (x *exeInfo) readDirect(mem memory, bias uint64, regs []threadRegs, opts *Options) (*Dump, error) {
	le := binary.LittleEndian
	read := func(addr uint64, p []byte) bool {
		return mem(addr, p) || (addr >= bias && x.readFile(addr-bias, p))
	}
	l := x.layout
	var hdr [16]byte
	if !read(x.allgs+bias, hdr[:]) {
		return nil, fmt.Errorf("goroutines: %s: runtime.allgs at %#x not readable", x.path, x.allgs+bias)
	}
	ptr, n := le.Uint64(hdr[:]), le.Uint64(hdr[8:])
	if n > 1<<24 {
		return nil, fmt.Errorf("goroutines: %s: runtime.allgs holds %d goroutines, more than this reader believes", x.path, n)
	}
	gps := make([]byte, n*8)
	if !read(ptr, gps) {
		return nil, fmt.Errorf("goroutines: %s: runtime.allgs array at %#x (%d) not readable", x.path, ptr, n)
	}
	byTid := map[int]threadRegs{}
	for _, r := range regs {
		byTid[r.tid] = r
	}
	labels := linux.NewLabelReader(x.path, func(addr uint64, p []byte) bool { return read(addr, p) })
	d := &Dump{Exe: x.path, GoVersion: x.goVersion}
	gb := make([]byte, l.gSize)
	var mb [8]byte
	depth := opts.maxFrames()
	u := unwinder{tab: x.tab, read: read, arm64: x.arm64}
	for i := uint64(0); i < n; i++ {
		ga := le.Uint64(gps[i*8:])
		if ga == 0 || !read(ga, gb) {
			d.Goroutines = append(d.Goroutines, Goroutine{Err: fmt.Errorf("g %d of allgs at %#x not readable", i, ga)})
			continue
		}
		u32 := func(off uint64) uint64 { return uint64(le.Uint32(gb[off:])) }
		u64 := func(off uint64) uint64 { return le.Uint64(gb[off:]) }
		st := u32(l.status)
		if s := st &^ 0x1000; s == 6 || s == 11 { // _Gdead, _Gdeadextra
			continue
		}
		g := Goroutine{ID: int64(u64(l.goid)), Status: statusName(st)}
		if l.hasWaitSince {
			g.WaitSince = int64(u64(l.waitSince))
		}
		if s := st &^ 0x1000; l.hasWaitReason && (s == 4 || s == 3) { // _Gwaiting, _Gsyscall
			if wr := gb[l.waitReason]; wr != 0 || s == 4 {
				g.WaitReason = api.WaitReasonString(&x.ver, int64(wr))
			}
		}
		// The thread running g: its m's curg is g.
		var onThread *threadRegs
		if ma := u64(l.m); ma != 0 && read(ma+l.mCurG, mb[:]) && le.Uint64(mb[:]) == ga && read(ma+l.mProcID, mb[:]) {
			g.Thread = int(le.Uint64(mb[:]))
			if r, ok := byTid[g.Thread]; ok {
				onThread = &r
			}
		}
		lo := u64(l.stackLo)
		if ls := labels.Labels(ga, lo); len(ls) > 0 {
			g.Labels = make(map[string]string, len(ls))
			for _, kv := range ls {
				g.Labels[kv.Key] = kv.Value
			}
		}
		if pc := u64(l.gopc); pc != 0 {
			g.CreatedBy = x.callSite(pc)
		}
		if fn, ok := x.tab.FuncAt(u64(l.startpc)); ok {
			g.StartFunc = fn.Name
			g.System = strings.HasPrefix(fn.Name, "runtime.") && fn.Name != "runtime.main" && fn.Name != "runtime.handleAsyncEvent"
		}
		// Where the stack is: the thread's registers for a goroutine on
		// a thread, else the saved sched, else the syscall's.
		var fr frameState
		switch {
		case onThread != nil:
			fr = frameState{pc: onThread.pc, sp: onThread.sp, bp: onThread.bp, lr: onThread.lr}
		case u64(l.schedPC) != 0:
			fr = frameState{pc: u64(l.schedPC), sp: u64(l.schedSP), bp: u64(l.schedBP)}
			if l.lr {
				fr.lr = u64(l.schedLR)
			}
		case l.hasSyscall && u64(l.syscallSP) != 0:
			fr = frameState{pc: u64(l.syscallPC), sp: u64(l.syscallSP)}
		}
		if fr.pc != 0 {
			g.Frames, g.Err = u.unwind(fr, depth)
		}
		g.StartFunc = unwrapStart(g.StartFunc, g.Frames)
		d.Goroutines = append(d.Goroutines, g)
	}
	slices.SortStableFunc(d.Goroutines, func(a, b Goroutine) int { return cmp.Compare(a.ID, b.ID) })
	return d, nil
}

// unwrapStart names the function a go statement's wrapper (the
// compiler's pkg.f.gowrapN around `go f(x)`) calls, as delve does: the
// function of the physical frame the wrapper's frame calls, found on the
// goroutine's own stack.
func unwrapStart(start string, frames []Frame) string {
	i := strings.LastIndex(start, ".gowrap")
	if i < 0 || strings.Trim(start[i+len(".gowrap"):], "0123456789") != "" {
		return start
	}
	// Frames of one physical frame share its pc, the outermost (the
	// function itself, not inlined) last.
	for k := len(frames) - 1; k > 0; k-- {
		if frames[k].Func != start || frames[k].Inlined {
			continue
		}
		first := k
		for first > 0 && frames[first-1].PC == frames[k].PC {
			first--
		}
		if first > 0 && !privateRuntime(frames[first-1].Func) {
			return frames[first-1].Func
		}
		break
	}
	return start
}

// privateRuntime says fn is an unexported function of the runtime,
// which delve does not unwrap a wrapper to.
func privateRuntime(fn string) bool {
	name, ok := strings.CutPrefix(fn, "runtime.")
	return ok && name != "" && !('A' <= name[0] && name[0] <= 'Z')
}

// callSite is the go statement at gopc, as the runtime's traceback (and
// delve) name it: the call instruction before the return address.
func (x *exeInfo) callSite(gopc uint64) Frame {
	pc := gopc
	if fn, ok := x.tab.FuncAt(pc); ok && pc > fn.Entry {
		pc--
	}
	var buf [8]gopclntab.Frame
	frs, ok := x.tab.Symbolize(pc, buf[:0])
	if !ok || len(frs) == 0 {
		return Frame{PC: gopc}
	}
	fn, _ := x.tab.FuncAt(pc)
	return Frame{PC: gopc, Func: fn.Name, File: frs[0].File, Line: frs[0].Line}
}

type frameState struct{ pc, sp, bp, lr uint64 }

// unwinder walks a goroutine's stack with the pclntab's pcsp tables.
type unwinder struct {
	tab   *gopclntab.Table
	read  memory
	arm64 bool
	buf   [16]gopclntab.Frame
}

// unwind returns the frames from fr outwards, innermost first, at most
// depth of them.
func (u *unwinder) unwind(fr frameState, depth int) ([]Frame, error) {
	var out []Frame
	var word [8]byte
	for top := true; len(out) < depth; top = false {
		fn, ok := u.tab.FuncAt(fr.pc)
		if !ok {
			if top {
				return out, fmt.Errorf("pc %#x is not in Go code", fr.pc)
			}
			return out, nil
		}
		// A caller's pc is a return address: its line is the call's.
		look := fr.pc
		if !top && fr.pc > fn.Entry {
			look--
		}
		frs, _ := u.tab.Symbolize(look, u.buf[:0])
		for i, f := range frs {
			out = append(out, Frame{PC: fr.pc, Func: f.Function, File: f.File, Line: f.Line, Inlined: i < len(frs)-1})
		}
		if stackEnd[fn.Name] {
			return out, nil
		}
		delta, ok := u.tab.SPDelta(fr.pc)
		if !ok {
			return out, fmt.Errorf("no frame size for %s at pc %#x", fn.Name, fr.pc)
		}
		var ret, sp uint64
		if u.arm64 {
			// The return address is in LR until the prologue saves it
			// at 0(SP); the caller's SP is above the frame.
			sp = fr.sp + uint64(delta)
			if delta == 0 {
				ret = fr.lr
			} else if u.read(fr.sp, word[:]) {
				ret = binary.LittleEndian.Uint64(word[:])
			} else {
				return out, fmt.Errorf("stack at %#x not readable", fr.sp)
			}
		} else {
			if !u.read(fr.sp+uint64(delta), word[:]) {
				return out, fmt.Errorf("stack at %#x not readable", fr.sp+uint64(delta))
			}
			ret = binary.LittleEndian.Uint64(word[:])
			sp = fr.sp + uint64(delta) + 8
		}
		if ret == 0 {
			return out, nil
		}
		fr = frameState{pc: ret, sp: sp}
	}
	return out, nil
}

// stackEnd are the functions a goroutine's (or a thread's) stack starts
// in: the runtime's traceback stops there too. funcIDs would say the
// same, but their numbering changes between Go versions.
var stackEnd = map[string]bool{"runtime.goexit": true, "runtime.mstart": true, "runtime.rt0_go": true}
