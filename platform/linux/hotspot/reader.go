package hotspot

import (
	"encoding/binary"
	"errors"
	"strings"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform/linux/jitstack"
)

// Regs are the registers a walk starts from.
type Regs = jitstack.Regs

// Stack is the thread's stack as the sample copied it (or, Live, the
// stopped thread's own).
type Stack = jitstack.Stack

// Why a walk was cut short.
const (
	CutRead  = iota // the VM's memory could not be read
	CutCheck        // a structure failed a check
	CutDepth        // the stack was deeper than MaxDepth
	numCuts
)

// Stats counts what the reader did.
type Stats struct {
	Stacks uint64          // samples given Java frames
	Frames uint64          // Java frames given, inlined ones included
	Funcs  uint64          // distinct functions interned
	Cut    [numCuts]uint64 // walks cut short, by reason
}

// Caps on what one walk reads.
const (
	MaxDepth     = 256     // native frames a walk follows
	maxInline    = 32      // scopes of one compiled frame
	maxFrameSize = 1 << 20 // bytes of one frame
	maxHeaps     = 8       // code heaps
	maxSegSteps  = 4096    // steps back through a code heap's segment map
	maxBlobName  = 96
	maxSection   = 4 << 20 // bytes of one nmethod's scopes, PcDescs or metadata
	maxLineTable = 64 << 10
	maxSymbol    = 1024
	maxBlobCache = 1 << 16 // pcs remembered per process
	// A starting VM's tables, or its code heaps, are read again at its
	// next sample after firstRetry, then after twice as long each time
	// up to maxRetry: soon after the VM fills them, at any sampling
	// rate (a count of samples waited 2.6 s at 99 Hz, most of a short
	// program's run).
	firstRetry = 5 * time.Millisecond
	maxRetry   = 200 * time.Millisecond
	settleTime = 5 * time.Second
)

// Blob kinds.
const (
	blobStub = iota
	blobNMethod
	blobInterpreter
)

// Reader names the Java frames of samples of the processes attached to it.
type Reader struct {
	read  func(pid uint32, addr uint64, buf []byte) bool
	procs map[uint32]*proc
	funcs map[string]uint64
	// Stats are the running counts.
	Stats Stats
	// Frozen says the memory read does not change (a core file): what
	// cannot be read at the first sample never will be, so it is an
	// error at once rather than a VM still starting, read again later.
	Frozen bool

	frames []format.JITFrame
	fresh  []format.JITFunc
	walk   []uint64
	tmp    [maxObject]byte
	scan   [512]byte
	w      [16]byte // the walk's stack words
	small  [8]byte  // one value read (a local buffer passed to read would escape)
}

type proc struct {
	path   string
	syms   Symbols
	layout *Layout
	err    error
	retry  backoff
	first  time.Time // the first reading of its tables

	heaps      [maxHeaps][3]uint64 // low, high, segment map's low
	heapLog    [maxHeaps]uint32
	nheaps     int
	heapsRetry backoff

	blobs   map[uint64]*blob // by the pc met
	methods map[uint64]*method
}

// blob is one CodeBlob of the code cache, as read once.
type blob struct {
	addr                uint64
	kind                int
	codeBegin, codeEnd  uint64
	frameSize, complete uint64 // bytes; frame complete offset
	method              uint64 // an nmethod's Method*
	tier                format.JITTier
	fn                  uint64   // a stub's function (its blob name)
	descs               []uint32 // an nmethod's PcDescs: pc offset, scope decode offset
	scopes              []byte
	metadata            []uint64
	at                  map[uint64][]scope // scopes by pc
}

type scope struct {
	fn   uint64
	line uint32
}

// method is one Method, as read once.
type method struct {
	hidden             bool // jstack and JFR leave its frames out
	constMethod        uint64
	codeBase, codeSize uint64
	fn                 uint64
	lines              []byte // its compressed line number table; nil none
}

// NewReader returns a Reader that reads process memory with read.
func NewReader(read func(pid uint32, addr uint64, buf []byte) bool) *Reader {
	return &Reader{read: read, procs: map[uint32]*proc{}, funcs: map[string]uint64{}}
}

// Attach tells the reader that pid runs the libjvm at path whose tables
// are at syms; l is its layout if another process already gave it.
func (r *Reader) Attach(pid uint32, path string, syms Symbols, l *Layout) {
	if p := r.procs[pid]; p != nil && p.syms == syms {
		return
	}
	r.procs[pid] = &proc{path: path, syms: syms, layout: l, blobs: map[uint64]*blob{}, methods: map[uint64]*method{}}
}

// Attached reports whether pid runs HotSpot.
func (r *Reader) Attached(pid uint32) bool { return r.procs[pid] != nil }

// Any reports whether some process runs HotSpot.
func (r *Reader) Any() bool { return len(r.procs) > 0 }

// Forget drops what is known of process pid.
func (r *Reader) Forget(pid uint32) { delete(r.procs, pid) }

// Err returns why pid's frames are not read ("" for none).
func (r *Reader) Err(pid uint32) error {
	if p := r.procs[pid]; p != nil {
		return p.err
	}
	return nil
}

// Frames returns the Java frames of a sample of pid whose registers were
// regs and whose stack is st, leaf first; the functions met for the first
// time; and the sample's native stack as the walk found it (leaf first,
// user frames only): compiled Java code keeps no frame pointers, so a
// native unwinder stops at it, and the walk goes on from each frame's
// size in its CodeBlob. All three are valid until the next call. With
// pcs (the native stack a session unwound, leaf first) the walk starts at
// its first frame in the code cache; without, it follows frame pointers
// from regs to it.
func (r *Reader) Frames(pid uint32, regs Regs, st Stack, pcs []uint64) ([]format.JITFrame, []format.JITFunc, []uint64) {
	r.frames, r.fresh, r.walk = r.frames[:0], r.fresh[:0], r.walk[:0]
	p := r.procs[pid]
	if p == nil || !r.ready(p, pid) {
		return nil, nil, nil
	}
	pc, sp, fp, leaf, ok := r.start(p, pid, regs, st, pcs)
	if !ok {
		return nil, nil, nil
	}
	r.javaWalk(p, pid, pc, sp, fp, leaf, st)
	if len(r.frames) == 0 {
		return nil, r.fresh, nil
	}
	r.Stats.Stacks++
	r.Stats.Frames += uint64(len(r.frames))
	return r.frames, r.fresh, r.walk
}

// ready reads p's layout and code heaps when it has not yet.
func (r *Reader) ready(p *proc, pid uint32) bool {
	if p.err != nil {
		return false
	}
	if p.layout == nil {
		if p.retry.wait() {
			return false
		}
		l, err := readLayout(func(addr uint64, b []byte) bool { return r.read(pid, addr, b) }, p.syms)
		if p.first.IsZero() {
			p.first = time.Now()
		}
		// Tables still being filled may read as anything: an error is
		// final only once the VM has had settleTime to start.
		if !r.Frozen && (err == errNotReady || err != nil && time.Since(p.first) < settleTime) {
			p.retry.miss()
			return false
		}
		if err != nil {
			p.err = err
			return false
		}
		p.layout = l
	}
	if p.nheaps == 0 {
		if p.heapsRetry.wait() {
			return false
		}
		r.readHeaps(p, pid)
		if p.nheaps == 0 {
			if r.Frozen {
				p.err = errors.New("hotspot: the code cache's heaps could not be read")
			}
			p.heapsRetry.miss()
			return false
		}
	}
	return true
}

// backoff spaces the reads of what a starting VM has not filled yet.
type backoff struct {
	at   time.Time     // not before then
	last time.Duration // the last wait
}

// wait reports whether it is too early to read again.
func (b *backoff) wait() bool { return !b.at.IsZero() && time.Now().Before(b.at) }

// miss records a read that found nothing yet.
func (b *backoff) miss() {
	b.last = min(max(2*b.last, firstRetry), maxRetry)
	b.at = time.Now().Add(b.last)
}

// readHeaps reads the bounds of the code cache's heaps.
func (r *Reader) readHeaps(p *proc, pid uint32) {
	l := p.layout
	p.nheaps = 0
	ga, ok := r.word(pid, l.codeHeaps)
	if !ok || ga == 0 {
		return
	}
	n, ok1 := r.i32(pid, ga+l.gaLen)
	data, ok2 := r.word(pid, ga+l.gaData)
	if !ok1 || !ok2 || n <= 0 || n > maxHeaps {
		return
	}
	for i := uint64(0); i < uint64(n); i++ {
		h, ok := r.word(pid, data+8*i)
		if !ok {
			return
		}
		low, ok1 := r.word(pid, h+l.heapMemory+l.vsLow)
		high, ok2 := r.word(pid, h+l.heapMemory+l.vsHigh)
		seg, ok3 := r.word(pid, h+l.heapSegmap+l.vsLow)
		lg, ok4 := r.i32(pid, h+l.heapLog)
		if !ok1 || !ok2 || !ok3 || !ok4 || low >= high || lg < 4 || lg > 16 {
			continue
		}
		p.heaps[p.nheaps] = [3]uint64{low, high, seg}
		p.heapLog[p.nheaps] = uint32(lg)
		p.nheaps++
	}
}

// heapOf returns the index of the code heap holding pc, or -1.
func (p *proc) heapOf(pc uint64) int {
	for i := 0; i < p.nheaps; i++ {
		if pc >= p.heaps[i][0] && pc < p.heaps[i][1] {
			return i
		}
	}
	return -1
}

// start finds the walk's first frame in the code cache.
func (r *Reader) start(p *proc, pid uint32, regs Regs, st Stack, pcs []uint64) (pc, sp, fp uint64, leaf, ok bool) {
	if p.heapOf(regs.PC) >= 0 {
		r.walk = append(r.walk, regs.PC)
		return regs.PC, regs.SP, regs.FP, true, true
	}
	w := r.w[:16]
	if len(pcs) == 0 {
		// Frame pointers from the registers.
		pc, fp = regs.PC, regs.FP
		for depth := 0; depth < MaxDepth; depth++ {
			r.walk = append(r.walk, pc)
			if fp == 0 || !r.stack(pid, st, fp, w) {
				return 0, 0, 0, false, false
			}
			next, ret := le64(w, 0), le64(w, 8)
			if ret == 0 {
				return 0, 0, 0, false, false
			}
			if p.heapOf(ret) >= 0 {
				r.walk = append(r.walk, ret)
				return ret, fp + 16, next, false, true
			}
			if next <= fp || next-fp > maxFrameSize {
				return 0, 0, 0, false, false
			}
			pc, fp = ret, next
		}
		return 0, 0, 0, false, false
	}
	pos := regs.SP
	first := true
	for i, pc := range pcs {
		if pc >= kernelStart {
			continue
		}
		if i >= MaxDepth {
			return 0, 0, 0, false, false
		}
		if first {
			first = false
			if pc == regs.PC {
				r.walk = append(r.walk, pc)
				continue
			}
		}
		at, found := r.find(pid, st, pos, pc)
		if !found {
			return 0, 0, 0, false, false
		}
		pos = at + 8
		r.walk = append(r.walk, pc)
		if p.heapOf(pc) >= 0 {
			// The callee's saved frame pointer, below its return address
			// (native code and the VM's stubs keep frame pointers).
			if !r.stack(pid, st, at-8, w[:8]) {
				return 0, 0, 0, false, false
			}
			return pc, at + 8, le64(w, 0), false, true
		}
	}
	return 0, 0, 0, false, false
}

// kernelStart is where x86-64 kernel addresses begin.
const kernelStart = 0xffff800000000000

// javaWalk walks the frames from the one at pc (sp its stack pointer, fp
// the frame pointer register) while they are in the code cache, then
// native ones by their frame pointers.
func (r *Reader) javaWalk(p *proc, pid uint32, pc, sp, fp uint64, leaf bool, st Stack) {
	w := r.w[:16]
	for depth := 0; ; depth++ {
		if depth == MaxDepth {
			r.Stats.Cut[CutDepth]++
			return
		}
		var ret, next, nsp uint64
		if p.heapOf(pc) < 0 { // native: frame pointers
			if fp == 0 || !r.stack(pid, st, fp, w) {
				return
			}
			next, ret, nsp = le64(w, 0), le64(w, 8), fp+16
			if next <= fp || next-fp > maxFrameSize {
				next = 0
			}
		} else {
			b := r.blobAt(p, pid, pc, leaf)
			if b == nil {
				return
			}
			switch {
			case b.kind == blobInterpreter:
				r.interpreted(p, pid, pc, fp, st)
				if fp == 0 || !r.stack(pid, st, fp, w) {
					return
				}
				next, ret, nsp = le64(w, 0), le64(w, 8), fp+16
			case leaf && (b.frameSize == 0 || pc < b.codeBegin+b.complete):
				// A stub without a frame, or code before its frame is
				// built: the return address is on top.
				r.compiled(p, pid, b, pc, leaf)
				if !r.stack(pid, st, sp, w[:8]) {
					return
				}
				next, ret, nsp = fp, le64(w, 0), sp+8
			case b.frameSize == 0: // a stub with a frame pointer (the call stub)
				r.compiled(p, pid, b, pc, leaf)
				if fp == 0 || !r.stack(pid, st, fp, w) {
					return
				}
				next, ret, nsp = le64(w, 0), le64(w, 8), fp+16
			default:
				r.compiled(p, pid, b, pc, leaf)
				nsp = sp + b.frameSize
				if nsp < sp+16 || !r.stack(pid, st, nsp-16, w) {
					r.Stats.Cut[CutRead]++
					return
				}
				next, ret = le64(w, 0), le64(w, 8)
			}
		}
		if ret == 0 || ret >= kernelStart || nsp <= sp && depth > 0 {
			return
		}
		pc, sp, fp, leaf = ret, nsp, next, false
		r.walk = append(r.walk, pc)
	}
}

// blobAt returns the CodeBlob holding pc, read or cached; nil when it
// could not be read or failed a check (counted).
func (r *Reader) blobAt(p *proc, pid uint32, pc uint64, leaf bool) *blob {
	l := p.layout
	hdr := r.tmp[:l.blobHeader]
	if b := p.blobs[pc]; b != nil {
		// Still the same blob: its header still says so.
		if r.read(pid, b.addr, hdr) && le64(hdr, l.blobCodeBegin) == b.codeBegin && le64(hdr, l.blobCodeEnd) == b.codeEnd {
			if b.kind != blobNMethod {
				return b
			}
			if m, ok := r.word(pid, b.addr+l.cmMethod); ok && m == b.method {
				return b
			}
		}
		delete(p.blobs, pc)
	}
	h := p.heapOf(pc)
	if h < 0 {
		return nil
	}
	low, seg, lg := p.heaps[h][0], p.heaps[h][2], p.heapLog[h]
	i := (pc - low) >> lg
	for steps := 0; ; steps++ {
		c, ok := r.u8(pid, seg+i)
		if steps == maxSegSteps || !ok {
			r.Stats.Cut[CutRead]++
			return nil
		}
		if c == 0xff {
			r.Stats.Cut[CutCheck]++
			return nil
		}
		if c == 0 {
			break
		}
		if uint64(c) > i {
			r.Stats.Cut[CutCheck]++
			return nil
		}
		i -= uint64(c)
	}
	block := low + i<<lg
	if used, ok := r.u8(pid, block+l.blockUsed); !ok || used == 0 {
		r.Stats.Cut[CutCheck]++
		return nil
	}
	addr := block + l.heapBlockSize
	if !r.read(pid, addr, hdr) {
		r.Stats.Cut[CutRead]++
		return nil
	}
	b := &blob{addr: addr, codeBegin: le64(hdr, l.blobCodeBegin), codeEnd: le64(hdr, l.blobCodeEnd)}
	size := uint64(le32(hdr, l.blobSize))
	fs := int64(int32(le32(hdr, l.blobFrameSize)))
	fc := int64(int32(le32(hdr, l.blobFrameComplete)))
	if b.codeBegin < addr || b.codeEnd > addr+size || pc < b.codeBegin || pc > b.codeEnd || fs < 0 || fs > maxFrameSize/8 {
		r.Stats.Cut[CutCheck]++
		return nil
	}
	b.frameSize = uint64(fs) * 8
	if fc > 0 {
		b.complete = uint64(fc)
	}
	name, ok := r.cstring(pid, le64(hdr, l.blobName), maxBlobName)
	if !ok {
		r.Stats.Cut[CutRead]++
		return nil
	}
	switch name {
	case "nmethod":
		b.kind = blobNMethod
		if !r.readNMethod(p, pid, b, addr) {
			r.Stats.Cut[CutCheck]++
			return nil
		}
	case "Interpreter":
		b.kind = blobInterpreter
	default:
		b.tier = format.JITTierStub
		b.fn = r.intern(name, "")
	}
	if len(p.blobs) >= maxBlobCache {
		clear(p.blobs)
	}
	p.blobs[pc] = b
	return b
}

// readNMethod reads what naming an nmethod's frames needs: its method,
// tier, PcDescs, scopes data and metadata.
func (r *Reader) readNMethod(p *proc, pid uint32, b *blob, addr uint64) bool {
	l := p.layout
	var ok bool
	if b.method, ok = r.word(pid, addr+l.cmMethod); !ok {
		return false
	}
	lvl, ok1 := r.i32(pid, addr+l.nmCompLevel)
	scopes, ok2 := r.word(pid, addr+l.cmScopesData)
	meta, ok3 := r.i32(pid, addr+l.nmMetadata)
	pcs, ok4 := r.i32(pid, addr+l.nmScopesPcs)
	deps, ok5 := r.i32(pid, addr+l.nmDepends)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return false
	}
	switch {
	case lvl == 4:
		b.tier = format.JITTierOptimized
	case lvl >= 1 && lvl <= 3:
		b.tier = format.JITTierBaseline
	default:
		b.tier = format.JITTierOptimized
	}
	metaAt, pcsAt, pcsEnd := addr+uint64(meta), addr+uint64(pcs), addr+uint64(deps)
	if meta < 0 || pcs < 0 || deps < 0 || metaAt > scopes || scopes > pcsAt || pcsAt > pcsEnd ||
		scopes-metaAt > maxSection || pcsAt-scopes > maxSection || pcsEnd-pcsAt > maxSection || (scopes-metaAt)%8 != 0 {
		return false
	}
	raw := make([]byte, pcsEnd-metaAt)
	if !r.read(pid, metaAt, raw) {
		return false
	}
	b.metadata = make([]uint64, (scopes-metaAt)/8)
	for i := range b.metadata {
		b.metadata[i] = le64(raw, uint64(i)*8)
	}
	b.scopes = raw[scopes-metaAt : pcsAt-metaAt]
	pd := raw[pcsAt-metaAt:]
	n := uint64(len(pd)) / l.pcDescSize
	b.descs = make([]uint32, 0, 2*n)
	for i := uint64(0); i < n; i++ {
		d := pd[i*l.pcDescSize:]
		b.descs = append(b.descs, le32(d, l.pcOffset), le32(d, l.pcScope))
	}
	b.at = map[uint64][]scope{}
	return true
}

// compiled appends the frames of blob b at pc: a stub's name, or an
// nmethod's scopes there, inlined ones first.
func (r *Reader) compiled(p *proc, pid uint32, b *blob, pc uint64, leaf bool) {
	if b.kind != blobNMethod {
		r.frames = append(r.frames, format.JITFrame{PC: pc, Func: b.fn, Tier: format.JITTierStub})
		return
	}
	sc, ok := b.at[pc]
	if !ok {
		sc = r.scopesAt(p, pid, b, pc, leaf)
		b.at[pc] = sc
	}
	if len(sc) == 0 {
		// No debug information there (a pc in the method's prologue):
		// the method compiled.
		if m := r.method(p, pid, b.method); m != nil && !m.hidden {
			r.frames = append(r.frames, format.JITFrame{PC: pc, Func: m.fn, Tier: b.tier})
		}
		return
	}
	for i, s := range sc {
		r.frames = append(r.frames, format.JITFrame{PC: pc, Func: s.fn, Line: s.line, Tier: b.tier, Inlined: i < len(sc)-1})
	}
}

// scopesAt decodes the scopes of nmethod b at pc: the PcDesc of a return
// address is the call's; a leaf takes the next PcDesc at or after it
// (HotSpot's own approximate lookup).
func (r *Reader) scopesAt(p *proc, pid uint32, b *blob, pc uint64, leaf bool) []scope {
	if pc < b.codeBegin {
		return nil
	}
	off := pc - b.codeBegin
	best, bestOff := -1, uint64(1<<63)
	for i := 0; i+1 < len(b.descs); i += 2 {
		po := int64(int32(b.descs[i]))
		if po < 0 {
			continue
		}
		if !leaf && uint64(po) == off {
			best = i
			break
		}
		if uint64(po) >= off && uint64(po) < bestOff {
			best, bestOff = i, uint64(po)
		}
	}
	if best < 0 {
		return nil
	}
	var out []scope
	dec := b.descs[best+1]
	for n := 0; dec != 0 && n < maxInline; n++ {
		s := stream{b: b.scopes, pos: int(dec)}
		sender := s.readInt()
		mi := s.readInt()
		bci := int64(s.readInt()) - 1
		if s.bad || mi == 0 || uint64(mi) > uint64(len(b.metadata)) {
			r.Stats.Cut[CutCheck]++
			return out
		}
		m := r.method(p, pid, b.metadata[mi-1])
		if m == nil {
			return out
		}
		if !m.hidden {
			out = append(out, scope{fn: m.fn, line: m.line(bci)})
		}
		if sender >= dec && sender != 0 {
			break // senders are written before their callees
		}
		dec = sender
	}
	return out
}

// interpreted appends the interpreter frame whose frame pointer is fp.
func (r *Reader) interpreted(p *proc, pid uint32, pc, fp uint64, st Stack) {
	l := p.layout
	w := r.small[:8]
	if fp == 0 || !r.stack(pid, st, uint64(int64(fp)+l.fpMethod), w) {
		return
	}
	mp := le64(w, 0)
	if !r.stack(pid, st, uint64(int64(fp)+l.fpBcp), w) {
		return
	}
	bcp := le64(w, 0)
	m := r.method(p, pid, mp)
	if m == nil {
		return
	}
	// The method must still be what was cached, and bcp in its code.
	if cm, ok := r.word(pid, mp+l.methodConst); !ok || cm != m.constMethod {
		delete(p.methods, mp)
		if m = r.method(p, pid, mp); m == nil {
			return
		}
	}
	if m.hidden {
		return
	}
	if m.codeSize == 0 { // a native method: no bytecode, no line
		r.frames = append(r.frames, format.JITFrame{PC: pc, Func: m.fn, Tier: format.JITTierInterpreted})
		return
	}
	if bcp < m.codeBase || bcp >= m.codeBase+m.codeSize {
		r.Stats.Cut[CutCheck]++
		return
	}
	r.frames = append(r.frames, format.JITFrame{PC: pc, Func: m.fn, Line: m.line(int64(bcp - m.codeBase)), Tier: format.JITTierInterpreted})
}

// method reads (or returns cached) Method mp: its name, file and line
// number table.
func (r *Reader) method(p *proc, pid uint32, mp uint64) *method {
	if m := p.methods[mp]; m != nil {
		return m
	}
	l := p.layout
	if mp == 0 {
		return nil
	}
	cm, ok := r.word(pid, mp+l.methodConst)
	if !ok || cm == 0 {
		r.Stats.Cut[CutRead]++
		return nil
	}
	hdr := r.tmp[:l.constMethodSize]
	if l.constMethodSize > maxObject || !r.read(pid, cm, hdr) {
		r.Stats.Cut[CutRead]++
		return nil
	}
	cp := le64(hdr, l.cmConstants)
	flags := uint64(le16(hdr, l.cmFlags))
	codeSize := uint64(le16(hdr, l.cmCodeSize))
	nameIdx := uint64(le16(hdr, l.cmNameIndex))
	holder, ok1 := r.word(pid, cp+l.cpHolder)
	nameSym, ok2 := r.word(pid, cp+l.cpSize+8*nameIdx)
	if !ok1 || !ok2 {
		r.Stats.Cut[CutRead]++
		return nil
	}
	klassSym, ok1 := r.word(pid, holder+l.klassName)
	name, ok2 := r.symbol(p, pid, nameSym)
	klass, ok3 := r.symbol(p, pid, klassSym)
	if !ok1 || !ok2 || !ok3 || name == "" || klass == "" {
		r.Stats.Cut[CutCheck]++
		return nil
	}
	file := ""
	at := holder + l.ikSourceFile
	if l.srcInPool {
		at = cp + l.ikSourceFile
	}
	if sf, ok := r.u16(pid, at); ok {
		if idx := uint64(sf); idx != 0 {
			if s, ok := r.word(pid, cp+l.cpSize+8*idx); ok {
				file, _ = r.symbol(p, pid, s)
			}
		}
	}
	m := &method{constMethod: cm, codeBase: cm + l.constMethodSize, codeSize: codeSize}
	if l.methodHidden != 0 {
		if f, ok := r.u16(pid, mp+l.methodFlags); ok {
			m.hidden = uint64(f)&l.methodHidden != 0
		}
	}
	m.fn = r.intern(strings.ReplaceAll(klass, "/", ".")+"."+name, file)
	if flags&l.hasLineTable != 0 {
		m.lines = r.lineTable(pid, m.codeBase+codeSize)
	}
	p.methods[mp] = m
	return m
}

// lineTable reads a compressed line number table at addr, up to its
// terminator.
func (r *Reader) lineTable(pid uint32, addr uint64) []byte {
	var buf []byte
	for len(buf) < maxLineTable {
		chunk := r.scan[:]
		if !r.read(pid, addr+uint64(len(buf)), chunk) {
			// Near the end of a mapping: a byte at a time.
			if !r.read(pid, addr+uint64(len(buf)), chunk[:1]) {
				return nil
			}
			chunk = chunk[:1]
		}
		buf = append(buf, chunk...)
		if n, ok := lineTableLen(buf); ok {
			return buf[:n]
		}
	}
	return nil
}

// lineTableLen returns the length of the table b starts with, terminator
// included, and false when b ends first.
func lineTableLen(b []byte) (int, bool) {
	s := stream{b: b}
	for !s.bad {
		c := s.byte()
		if s.bad {
			break
		}
		if c == 0 {
			return s.pos, true
		}
		if c == 0xff {
			s.readInt()
			s.readInt()
		}
	}
	return 0, false
}

// line returns the line of bytecode index bci: the entry at it, or the
// last one before it (the serviceability agent's rule); 0 unknown.
func (m *method) line(bci int64) uint32 {
	if m.lines == nil || bci < 0 {
		return 0
	}
	s := stream{b: m.lines}
	var cur, line int64
	var bestBCI, best int64 = 0, -1
	for !s.bad {
		c := s.byte()
		if s.bad || c == 0 {
			break
		}
		if c == 0xff {
			cur += int64(signed(s.readInt()))
			line += int64(signed(s.readInt()))
		} else {
			cur += int64(c >> 3)
			line += int64(c & 7)
		}
		if cur == bci {
			best = line
			break
		}
		if cur < bci && cur >= bestBCI {
			bestBCI, best = cur, line
		}
	}
	if best <= 0 || best > 1<<24 {
		return 0
	}
	return uint32(best)
}

// stream reads HotSpot's compressed streams (UNSIGNED5: bytes below 192
// end a number; each byte is worth 64 times the one before).
type stream struct {
	b   []byte
	pos int
	bad bool
}

func (s *stream) byte() byte {
	if s.pos < 0 || s.pos >= len(s.b) {
		s.bad = true
		return 0
	}
	c := s.b[s.pos]
	s.pos++
	return c
}

func (s *stream) readInt() uint32 {
	const l, lgH = 192, 6
	sum := uint32(s.byte())
	if sum < l {
		return sum
	}
	shift := uint32(lgH)
	for i := 1; i <= 4; i++ {
		c := uint32(s.byte())
		sum += c << shift
		if c < l {
			break
		}
		shift += lgH
	}
	return sum
}

func signed(v uint32) int32 { return int32(v>>1) ^ -int32(v&1) }

// symbol reads a Symbol's text.
func (r *Reader) symbol(p *proc, pid uint32, sym uint64) (string, bool) {
	l := p.layout
	if sym == 0 {
		return "", false
	}
	n, ok := r.u16(pid, sym+l.symLength)
	if !ok {
		return "", false
	}
	ln := uint64(n)
	if ln > maxSymbol {
		return "", false
	}
	b := r.tmp[:ln]
	if !r.read(pid, sym+l.symBody, b) {
		return "", false
	}
	return string(b), true
}

// cstring reads a NUL-terminated string of at most max bytes.
func (r *Reader) cstring(pid uint32, addr uint64, max int) (string, bool) {
	if addr == 0 {
		return "", false
	}
	b := r.scan[:max]
	if rest := 4096 - addr%4096; rest < uint64(max) {
		b = b[:rest]
	}
	if !r.read(pid, addr, b) {
		return "", false
	}
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), true
		}
	}
	return "", false
}

// intern returns the id of function name in file.
func (r *Reader) intern(name, file string) uint64 {
	key := name + "\x00" + file
	if id, ok := r.funcs[key]; ok {
		return id
	}
	id := uint64(len(r.funcs) + 1)
	r.funcs[key] = id
	r.fresh = append(r.fresh, format.JITFunc{ID: id, Runtime: format.JITRuntimeHotSpot, Name: name, File: file})
	r.Stats.Funcs++
	return id
}

// find returns the address, at or above from, of the first stack word
// holding ret.
func (r *Reader) find(pid uint32, st Stack, from, ret uint64) (uint64, bool) {
	return st.Find(r.read, pid, r.scan[:], from, ret, maxFrameSize)
}

// stack reads the stack at addr into b: from the copy, or from the
// process when st.Live.
func (r *Reader) stack(pid uint32, st Stack, addr uint64, b []byte) bool {
	return st.Read(r.read, pid, addr, b)
}

func (r *Reader) word(pid uint32, addr uint64) (uint64, bool) {
	b := r.small[:8]
	if !r.read(pid, addr, b) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b), true
}

func (r *Reader) i32(pid uint32, addr uint64) (int32, bool) {
	b := r.small[:4]
	if !r.read(pid, addr, b) {
		return 0, false
	}
	return int32(binary.LittleEndian.Uint32(b)), true
}

func (r *Reader) u16(pid uint32, addr uint64) (uint16, bool) {
	b := r.small[:2]
	if !r.read(pid, addr, b) {
		return 0, false
	}
	return binary.LittleEndian.Uint16(b), true
}

func (r *Reader) u8(pid uint32, addr uint64) (byte, bool) {
	b := r.small[:1]
	if !r.read(pid, addr, b) {
		return 0, false
	}
	return b[0], true
}

func le64(b []byte, off uint64) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
func le32(b []byte, off uint64) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
func le16(b []byte, off uint64) uint16 { return binary.LittleEndian.Uint16(b[off:]) }
