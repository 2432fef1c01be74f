package goroutines

import (
	"bytes"
	"cmp"
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/go-delve/delve/pkg/goversion"
	"github.com/go-delve/delve/service/api"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/gopclntab"
	"github.com/rawstack/rawstack/internal/radix"
	"github.com/rawstack/rawstack/platform/linux/goruntime"
	"github.com/rawstack/rawstack/platform/snapshot"
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
	labels                                      uint64 // 0: none
	mProcID, mCurG                              uint64
	hasWaitReason, hasWaitSince, hasSyscall, lr bool
}

func rtLayoutOf(exe string) (*rtLayout, error) {
	ms, sizes, err := goruntime.GoStructMembers(exe, "runtime.g", "runtime.gobuf", "runtime.m", "runtime.stack")
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
	l.labels = g["labels"]
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
	labels     *goruntime.LabelReader
	labelRead  memory // what labels reads through, set by collect
	file       *os.File
	pie        bool
	lowestLoad uint64
}

func (x *exeInfo) close() {
	if x.file != nil {
		x.file.Close()
	}
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
	// The label reader reads the DWARF types too, on its own: both at
	// once.
	lr := make(chan *goruntime.LabelReader, 1)
	go func() {
		lr <- goruntime.NewLabelReader(exe, func(addr uint64, p []byte) bool { return x.labelRead != nil && x.labelRead(addr, p) })
	}()
	defer func() {
		if x.labels == nil {
			x.labels = <-lr
		}
	}()
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
	// file (read-only data: constant label strings), read on demand.
	type seg struct{ vaddr, off, size uint64 }
	var segs []seg
	x.lowestLoad = ^uint64(0)
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		x.lowestLoad = min(x.lowestLoad, p.Vaddr)
		if p.Flags&elf.PF_W == 0 {
			segs = append(segs, seg{p.Vaddr, p.Off, p.Filesz})
		}
	}
	fh, err := os.Open(exe)
	if err != nil {
		return nil, err
	}
	x.file = fh
	x.readFile = func(addr uint64, p []byte) bool {
		for _, s := range segs {
			if addr >= s.vaddr && addr-s.vaddr <= s.size && uint64(len(p)) <= s.size-(addr-s.vaddr) {
				_, err := fh.ReadAt(p, int64(s.off+addr-s.vaddr))
				return err == nil
			}
		}
		return false
	}
	if x.tab, err = gopclntab.ParseELFInline(f, maxPclntab, x.readFile); err != nil {
		return nil, fmt.Errorf("%s: %w", exe, err)
	}
	return x, nil
}

// gCopy is what is read of one goroutine while its process is stopped:
// its g, the thread it runs on, its labels and the used part of its
// stack.
type gCopy struct {
	addr    uint64
	g       []byte
	thread  int
	labels  []format.Label
	fr      frameState // where the unwind starts
	stackAt uint64     // address of stack[0]
	stack   []byte
}

// gSpan is one read of g's that lie next to each other in memory.
type gSpan struct{ lo, hi uint64 }

// readPlan is what a pass over the running target, before it is stopped,
// says of the reads the stopped pass makes: where the g's are (allgs
// changes only when goroutines are created), and memory for the copies,
// already faulted in, so the stopped pass neither sorts 10,000 addresses
// nor takes a page fault per page it copies into.
type readPlan struct {
	allgs  []byte   // the allgs array as it was read
	addrs  []uint64 // the g addresses of allgs, sorted
	spans  []gSpan
	arenas [][]byte // memory for the stopped pass's copies
}

// take returns n bytes of the first of p's arenas with room for them, or
// of the heap (without a plan, or once they are used up).
func (p *readPlan) take(n uint64) []byte {
	if p != nil {
		for i, a := range p.arenas {
			if uint64(len(a)) >= n {
				p.arenas[i] = a[n:]
				return a[:n:n]
			}
		}
	}
	return make([]byte, n)
}

// plan reads the running target with rd (no stop: what it reads may be
// changing, and is only a guide) and returns the plan of the stopped
// pass, nil if allgs could not be read.
func (x *exeInfo) plan(rd func([]snapshot.MemRead), bias uint64) *readPlan {
	le := binary.LittleEndian
	l := x.layout
	var hdr [16]byte
	r := []snapshot.MemRead{{Addr: x.allgs + bias, Buf: hdr[:]}}
	if rd(r); !r[0].OK {
		return nil
	}
	ptr, n := le.Uint64(hdr[:]), le.Uint64(hdr[8:])
	if n > 1<<24 {
		return nil
	}
	p := &readPlan{allgs: make([]byte, n*8)}
	r = []snapshot.MemRead{{Addr: ptr, Buf: p.allgs}}
	if rd(r); !r[0].OK {
		return nil
	}
	p.addrs, p.spans = gSpans(p.allgs, l.gSize)
	// The g's as they are now say how much of each stack the stopped
	// pass will copy; the arena is sized from them, with room for
	// growth, and faulted in by this read.
	size := n * 8
	for _, sp := range p.spans {
		size += sp.hi - sp.lo
	}
	arena := make([]byte, size)
	gbuf := arena[n*8:]
	reads := make([]snapshot.MemRead, len(p.spans))
	for k, sp := range p.spans {
		reads[k] = snapshot.MemRead{Addr: sp.lo, Buf: gbuf[:sp.hi-sp.lo]}
		gbuf = gbuf[sp.hi-sp.lo:]
	}
	rd(reads)
	var stacks []stackRange
	for k, sp := range p.spans {
		if !reads[k].OK {
			continue
		}
		for _, a := range p.addrs[sort.Search(len(p.addrs), func(i int) bool { return p.addrs[i] >= sp.lo }):] {
			if a >= sp.hi {
				break
			}
			g := reads[k].Buf[a-sp.lo:][:l.gSize]
			if s := uint64(le.Uint32(g[l.status:])) &^ 0x1000; s == 6 || s == 11 {
				continue
			}
			lo, hi, sp := le.Uint64(g[l.stackLo:]), le.Uint64(g[l.stackHi:]), le.Uint64(g[l.schedSP:])
			if lo <= sp && sp < hi && hi-lo <= 1<<30 {
				stacks = append(stacks, stackRange{lo: sp, hi: hi})
			}
		}
	}
	var need uint64
	for _, m := range mergeStacks(stacks) {
		need += m.hi - m.lo
	}
	// Goroutines running now have more of their stacks in use, or none
	// (on a thread, sched unset): a quarter more and 256 KiB.
	need += need/4 + 256<<10
	more := make([]byte, need)
	for i := 0; i < len(more); i += pageSize {
		more[i] = 0 // fault it in now, not while the target is stopped
	}
	for i := 0; i < int(n*8); i += pageSize {
		arena[i] = 0
	}
	p.arenas = [][]byte{arena, more}
	return p
}

// gSpans returns the g addresses of an allgs array, sorted, and the
// reads that fetch them: g's are allocated from spans of equal-sized
// objects, mostly next to each other, so g's less than a g apart are
// read together and the kernel walks far fewer ranges.
func gSpans(allgs []byte, gSize uint64) ([]uint64, []gSpan) {
	le := binary.LittleEndian
	addrs := make([]uint64, len(allgs)/8)
	for i := range addrs {
		addrs[i] = le.Uint64(allgs[i*8:])
	}
	slices.Sort(addrs)
	var spans []gSpan
	for _, a := range addrs {
		if k := len(spans) - 1; k >= 0 && a <= spans[k].hi+gSize && a+gSize-spans[k].lo <= 1<<20 {
			spans[k].hi = max(spans[k].hi, a+gSize)
			continue
		}
		spans = append(spans, gSpan{a, a + gSize})
	}
	return addrs, spans
}

// stackRange is the used part of one stack, [lo, hi), and, once read,
// where its bytes are.
type stackRange struct {
	lo, hi uint64
	g      int // index in the goroutines
}

// mergeStacks returns the reads that fetch the ranges rs (sorted by lo in
// place): ranges in the same page are read together. Copying the gap
// between two in a page costs less than another range does: the kernel
// pins each range's pages one by one (10,000 parked goroutines' stacks,
// two to a page: 4.4 ms merged, 6-10 ms one read each, load ~7).
func mergeStacks(rs []stackRange) []gSpan {
	copy(rs, radix.SortByKey(rs, func(r stackRange) uint64 { return r.lo }))
	var out []gSpan
	for _, r := range rs {
		if k := len(out) - 1; k >= 0 && (r.lo < out[k].hi || r.lo/pageSize == (out[k].hi-1)/pageSize) {
			out[k].hi = max(out[k].hi, r.hi)
			continue
		}
		out = append(out, gSpan{r.lo, r.hi})
	}
	return out
}

const pageSize = 4096

// maxPclntab caps the .gopclntab read from the executable.
const maxPclntab = 1 << 30

// collect reads every goroutine of a stopped (or copied) Go process with
// rd, which fills a batch of reads at once; bias is where a
// position-independent executable was loaded (0 otherwise), regs are
// the stopped threads' registers and plan, if not nil, what a pass over
// the running target found (see [exeInfo.plan]). Reads are batched, so
// a live target stays stopped for a few system calls per thousand
// goroutines; nothing is unwound or named until it runs again.
func (x *exeInfo) collect(rd func([]snapshot.MemRead), bias uint64, regs []threadRegs, plan *readPlan) ([]gCopy, error) {
	le := binary.LittleEndian
	l := x.layout
	one := func(addr uint64, p []byte) bool {
		r := []snapshot.MemRead{{Addr: addr, Buf: p}}
		rd(r)
		return r[0].OK
	}
	var hdr [16]byte
	if !one(x.allgs+bias, hdr[:]) {
		return nil, fmt.Errorf("runtime.allgs at %#x not readable", x.allgs+bias)
	}
	ptr, n := le.Uint64(hdr[:]), le.Uint64(hdr[8:])
	if n > 1<<24 {
		return nil, fmt.Errorf("runtime.allgs holds %d goroutines, more than this reader believes", n)
	}
	gps := plan.take(n * 8)
	if !one(ptr, gps) {
		return nil, fmt.Errorf("runtime.allgs array at %#x (%d) not readable", ptr, n)
	}
	// Every g at once, in address order; where allgs is as it was
	// before the stop, so are the reads.
	var addrs []uint64
	var spans []gSpan
	if plan != nil && bytes.Equal(plan.allgs, gps) {
		addrs, spans = plan.addrs, plan.spans
	} else {
		addrs, spans = gSpans(gps, l.gSize)
	}
	merged := make([]snapshot.MemRead, len(spans))
	for k, sp := range spans {
		merged[k] = snapshot.MemRead{Addr: sp.lo, Buf: plan.take(sp.hi - sp.lo)}
	}
	rd(merged)
	reqs := make([]snapshot.MemRead, 0, n)
	var again []snapshot.MemRead // g's of a merged read that failed
	k := 0
	for _, a := range addrs {
		for k < len(spans) && spans[k].hi <= a {
			k++
		}
		if len(reqs) > 0 && reqs[len(reqs)-1].Addr == a {
			continue // listed twice
		}
		if k < len(spans) && merged[k].OK {
			off := a - spans[k].lo
			reqs = append(reqs, snapshot.MemRead{Addr: a, Buf: merged[k].Buf[off : off+l.gSize : off+l.gSize], OK: true})
		} else {
			reqs = append(reqs, snapshot.MemRead{Addr: a, Buf: make([]byte, l.gSize)})
			again = append(again, reqs[len(reqs)-1])
		}
	}
	if len(again) > 0 {
		rd(again)
		j := 0
		for i := range reqs {
			if j < len(again) && !reqs[i].OK && reqs[i].Addr == again[j].Addr {
				reqs[i].OK = again[j].OK
				j++
			}
		}
	}
	gs := make([]gCopy, 0, n)
	byAddr := map[uint64]int{}
	for _, r := range reqs {
		if !r.OK {
			gs = append(gs, gCopy{addr: r.Addr})
			continue
		}
		if s := uint64(le.Uint32(r.Buf[l.status:])) &^ 0x1000; s == 6 || s == 11 { // _Gdead, _Gdeadextra
			continue
		}
		if l.labels != 0 && le.Uint64(r.Buf[l.labels:]) != 0 {
			byAddr[r.Addr] = len(gs) // for the label reader
		}
		gs = append(gs, gCopy{addr: r.Addr, g: r.Buf})
	}
	// The m's of goroutines that have one: which g runs on them, and
	// their thread.
	type mInfo struct{ curg, procid [8]byte }
	ms := map[uint64]*mInfo{}
	var mreqs []snapshot.MemRead
	for i := range gs {
		if gs[i].g == nil {
			continue
		}
		if ma := le.Uint64(gs[i].g[l.m:]); ma != 0 && ms[ma] == nil {
			mi := &mInfo{}
			ms[ma] = mi
			mreqs = append(mreqs, snapshot.MemRead{Addr: ma + l.mCurG, Buf: mi.curg[:]}, snapshot.MemRead{Addr: ma + l.mProcID, Buf: mi.procid[:]})
		}
	}
	rd(mreqs)
	byTid := map[int]threadRegs{}
	for _, r := range regs {
		byTid[r.tid] = r
	}
	// Where each stack is: the thread's registers for a goroutine on a
	// thread, else the saved sched, else the syscall's; the stack is
	// copied from there to its top.
	var stacks []stackRange
	for i := range gs {
		c := &gs[i]
		if c.g == nil {
			continue
		}
		u64 := func(off uint64) uint64 { return le.Uint64(c.g[off:]) }
		var onThread *threadRegs
		if ma := u64(l.m); ma != 0 {
			if mi := ms[ma]; le.Uint64(mi.curg[:]) == c.addr {
				c.thread = int(le.Uint64(mi.procid[:]))
				if r, ok := byTid[c.thread]; ok {
					onThread = &r
				}
			}
		}
		lo, hi := u64(l.stackLo), u64(l.stackHi)
		switch {
		case onThread != nil && lo <= onThread.sp && onThread.sp < hi:
			c.fr = frameState{pc: onThread.pc, sp: onThread.sp, bp: onThread.bp, lr: onThread.lr}
		case u64(l.schedPC) != 0: // parked, or its thread is on the system stack
			c.fr = frameState{pc: u64(l.schedPC), sp: u64(l.schedSP), bp: u64(l.schedBP)}
			if l.lr {
				c.fr.lr = u64(l.schedLR)
			}
		case l.hasSyscall && u64(l.syscallSP) != 0:
			c.fr = frameState{pc: u64(l.syscallPC), sp: u64(l.syscallSP)}
		}
		if c.fr.pc != 0 && lo <= c.fr.sp && c.fr.sp < hi && hi-lo <= 1<<30 {
			c.stackAt = c.fr.sp
			stacks = append(stacks, stackRange{lo: c.fr.sp, hi: hi, g: i})
		}
	}
	// The stacks, those in one page in one read; a read that fails is
	// made again stack by stack.
	sreads := mergeStacks(stacks)
	sreqs := make([]snapshot.MemRead, len(sreads))
	for k, r := range sreads {
		sreqs[k] = snapshot.MemRead{Addr: r.lo, Buf: plan.take(r.hi - r.lo)}
	}
	rd(sreqs)
	var retry []snapshot.MemRead
	var retryOf []int
	k = 0
	for _, st := range stacks {
		for k < len(sreads) && sreads[k].hi < st.hi {
			k++
		}
		if k < len(sreqs) && sreqs[k].OK && sreads[k].lo <= st.lo {
			gs[st.g].stack = sreqs[k].Buf[st.lo-sreads[k].lo : st.hi-sreads[k].lo : st.hi-sreads[k].lo]
			continue
		}
		retry = append(retry, snapshot.MemRead{Addr: st.lo, Buf: make([]byte, st.hi-st.lo)})
		retryOf = append(retryOf, st.g)
	}
	if len(retry) > 0 {
		rd(retry)
		for j, r := range retry {
			if r.OK {
				gs[retryOf[j]].stack = r.Buf
			}
		}
	}
	// Labels: label maps are shared (a goroutine inherits its creator's),
	// so each distinct read is made once; the g's come from the copy.
	memo := map[[2]uint64][]byte{}
	x.labelRead = func(addr uint64, p []byte) bool {
		if i, ok := byAddr[addr]; ok && uint64(len(p)) <= l.gSize {
			copy(p, gs[i].g)
			return true
		}
		key := [2]uint64{addr, uint64(len(p))}
		if b, ok := memo[key]; ok {
			copy(p, b)
			return b != nil
		}
		if one(addr, p) || (addr >= bias && x.readFile(addr-bias, p)) {
			memo[key] = append([]byte(nil), p...)
			return true
		}
		memo[key] = nil
		return false
	}
	defer func() { x.labelRead = nil }()
	for i := range gs {
		if gs[i].g != nil && l.labels != 0 && le.Uint64(gs[i].g[l.labels:]) != 0 {
			gs[i].labels = x.labels.Labels(gs[i].addr, le.Uint64(gs[i].g[l.stackLo:]))
		}
	}
	return gs, nil
}

// interpret turns the copies into goroutines: states, creators, and the
// stacks unwound and named with the pclntab.
func (x *exeInfo) interpret(gs []gCopy, opts *Options) *Dump {
	le := binary.LittleEndian
	l := x.layout
	d := &Dump{Exe: x.path, GoVersion: x.goVersion, Goroutines: make([]Goroutine, 0, len(gs))}
	depth := opts.maxFrames()
	var c *gCopy
	u := unwinder{tab: x.tab, arm64: x.arm64, read: func(addr uint64, p []byte) bool {
		if addr < c.stackAt || addr-c.stackAt > uint64(len(c.stack)) || uint64(len(p)) > uint64(len(c.stack))-(addr-c.stackAt) {
			return false
		}
		copy(p, c.stack[addr-c.stackAt:])
		return true
	}}
	for i := range gs {
		c = &gs[i]
		if c.g == nil {
			d.Goroutines = append(d.Goroutines, Goroutine{Err: fmt.Errorf("g at %#x not readable", c.addr)})
			continue
		}
		u32 := func(off uint64) uint64 { return uint64(le.Uint32(c.g[off:])) }
		u64 := func(off uint64) uint64 { return le.Uint64(c.g[off:]) }
		st := u32(l.status)
		g := Goroutine{ID: int64(u64(l.goid)), Status: statusName(st), Thread: c.thread}
		if l.hasWaitSince {
			g.WaitSince = int64(u64(l.waitSince))
		}
		if s := st &^ 0x1000; l.hasWaitReason && (s == 4 || s == 3) { // _Gwaiting, _Gsyscall
			if wr := c.g[l.waitReason]; wr != 0 || s == 4 {
				g.WaitReason = api.WaitReasonString(&x.ver, int64(wr))
			}
		}
		if len(c.labels) > 0 {
			g.Labels = make(map[string]string, len(c.labels))
			for _, kv := range c.labels {
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
		if c.fr.pc != 0 {
			g.Frames, g.Err = u.unwind(c.fr, depth)
		}
		g.StartFunc = unwrapStart(g.StartFunc, g.Frames)
		d.Goroutines = append(d.Goroutines, g)
	}
	slices.SortStableFunc(d.Goroutines, func(a, b Goroutine) int { return cmp.Compare(a.ID, b.ID) })
	return d
}

// readDirect lists the goroutines of a copy of a Go process whose memory
// mem reads (see collect); planned plans the reads first, as Process
// does.
func (x *exeInfo) readDirect(mem memory, bias uint64, regs []threadRegs, opts *Options, planned bool) (*Dump, error) {
	rd := func(rs []snapshot.MemRead) {
		for i := range rs {
			rs[i].OK = mem(rs[i].Addr, rs[i].Buf) || (rs[i].Addr >= bias && x.readFile(rs[i].Addr-bias, rs[i].Buf))
		}
	}
	var plan *readPlan
	if planned {
		plan = x.plan(rd, bias)
	}
	gs, err := x.collect(rd, bias, regs, plan)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", x.path, err)
	}
	return x.interpret(gs, opts), nil
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
	// pcs memoizes what the tables say of each pc met (key pc<<1, |1 for
	// the innermost frame): thousands of goroutines parked in the same
	// few places repeat the same lookups.
	pcs map[uint64]*pcInfo
}

// pcInfo is what the pclntab says of one pc.
type pcInfo struct {
	ok     bool    // in Go code
	name   string  // its function
	frames []Frame // its frames, inlined ones first
	end    bool    // a function stacks start in
	delta  int64
	dOK    bool // delta is known
}

// info returns the memoized pclntab facts of pc.
func (u *unwinder) info(pc uint64, top bool) *pcInfo {
	key := pc << 1
	if top {
		key |= 1
	}
	if in := u.pcs[key]; in != nil {
		return in
	}
	if u.pcs == nil {
		u.pcs = map[uint64]*pcInfo{}
	}
	in := &pcInfo{}
	u.pcs[key] = in
	fn, ok := u.tab.FuncAt(pc)
	if !ok {
		return in
	}
	in.ok, in.name, in.end = true, fn.Name, stackEnd[fn.Name]
	// A caller's pc is a return address: its line is the call's.
	look := pc
	if !top && pc > fn.Entry {
		look--
	}
	frs, _ := u.tab.Symbolize(look, u.buf[:0])
	for i, f := range frs {
		in.frames = append(in.frames, Frame{PC: pc, Func: f.Function, File: f.File, Line: f.Line, Inlined: i < len(frs)-1})
	}
	if d, ok := u.tab.SPDelta(pc); ok {
		in.delta, in.dOK = int64(d), true
	}
	return in
}

// unwind returns the frames from fr outwards, innermost first, at most
// depth of them.
func (u *unwinder) unwind(fr frameState, depth int) ([]Frame, error) {
	var out []Frame
	var word [8]byte
	for top := true; len(out) < depth; top = false {
		in := u.info(fr.pc, top)
		if !in.ok {
			if top {
				return out, fmt.Errorf("pc %#x is not in Go code", fr.pc)
			}
			return out, nil
		}
		out = append(out, in.frames...)
		if in.end {
			return out, nil
		}
		if !in.dOK {
			return out, fmt.Errorf("no frame size for %s at pc %#x", in.name, fr.pc)
		}
		delta := in.delta
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
