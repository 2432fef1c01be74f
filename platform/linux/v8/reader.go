package v8

import (
	"encoding/binary"
	"sort"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform/linux/jitstack"
)

// Limits of what a Reader reads from a target. A frame chain deeper than
// MaxDepth is cut there; tables, names and sources larger than these are
// not read (their frames stay anonymous, or lose their line).
const (
	MaxDepth       = 256
	maxName        = 1024
	maxSource      = 16 << 20 // a script read to count its lines
	maxTable       = 1 << 20  // a source position or bytecode offset table
	maxLineEnds    = 1 << 20
	maxInlined     = 4096    // functions inlined into one code object
	maxCodeScan    = 1 << 18 // how far before a pc its InstructionStream's header is looked for (a code page)
	maxFrameSize   = 1 << 20 // between two frame pointers
	maxCodes       = 1 << 14 // code objects remembered per process
	scanBlock      = 4096
	retryMiss      = 64
	inliningSize   = 16 // an InliningPosition: SourcePosition (8), inlined_function_id (4), padding
	lineUnknown    = 0
	heapObjectTag  = 1
	heapObjectMask = 3
	weakTag        = 2 // a weak reference's bit, in a WeakFixedArray
)

// Reasons a frame was left anonymous, counted in [Stats].
const (
	CutRead     = iota // target memory could not be read (it moved, or the thread exited)
	CutType            // an object was not of the type the slot holds
	CutCode            // code whose header failed its checks, or no InstructionStream found before its pc
	CutStack           // the frame pointer chain left the stack copy
	CutDepth           // deeper than MaxDepth
	CutPosition        // an offset outside its code or bytecode, or a bad position table
	nCuts
)

// Stats counts what a Reader did.
type Stats struct {
	Stacks uint64        // samples given JavaScript frames
	Frames uint64        // frames given
	Funcs  uint64        // distinct functions interned
	Cut    [nCuts]uint64 // frames left anonymous, by reason
}

// Regs are the registers a walk starts from.
type Regs = jitstack.Regs

// Stack is the thread's stack as the sample copied it (or, Live, the
// stopped thread's own).
type Stack = jitstack.Stack

// Reader names the JavaScript frames of sampled threads from V8's heap,
// read out of their processes' memory. It is used from one goroutine.
type Reader struct {
	read  func(pid uint32, addr uint64, buf []byte) bool
	procs map[uint32]*proc
	ids   map[string]uint64 // name, file → JITFunc id
	Stats Stats

	frames []format.JITFrame
	alt    []format.JITFrame
	fresh  []format.JITFunc
	lines  []frameLine
	buf    [512]byte
	tmp    [16]byte // one word or two, read and used at once
	scan   [scanBlock]byte
	key    []byte
}

type proc struct {
	l     *Layout
	text  [][2]uint64 // executable mappings of the runtime's binary (embedded builtins, the interpreter)
	anon  func(pc uint64) bool
	isMap uint64 // the InstructionStream map (tagged), once found
	codes []*codeInfo
	miss  map[uint64]uint32 // pcs whose InstructionStream was looked for in vain: lookups skipped since
	types map[uint64]uint16
	sfis  map[uint64]*sfiInfo
	srcs  map[uint64]*scriptInfo
	bcs   map[uint64]*bcInfo
}

// codeInfo is a code object found before: the InstructionStream at is,
// whose Code is code, runs [start, end).
type codeInfo struct {
	start, end uint64
	is, code   uint64
	kind       uint32
	tier       format.JITTier
	sfi        *sfiInfo   // optimized: the function compiled
	inlined    []*sfiInfo // optimized: the functions inlined, by inlined_function_id
	positions  []byte     // optimized: source positions; baseline: bytecode offsets
	inlining   []byte     // optimized: InliningPositions
	bytecode   uint64     // baseline: its BytecodeArray (tagged)
	lines      map[uint64][]frameLine
}

type frameLine struct {
	fn   uint64 // JITFunc id
	line uint32
}

// sfiInfo is a SharedFunctionInfo read before, taken as the same while
// its name (or scope info) and script pointers read the same.
type sfiInfo struct {
	nameOrScope, script uint64
	fn                  uint64 // JITFunc id
	src                 *scriptInfo
}

type scriptInfo struct {
	ptr                       uint64 // the Script (tagged)
	name, source, lineEndsPtr uint64
	file                      string
	lineEnds                  []uint32 // offsets of the line ends; nil when not known
	tried                     bool     // lineEnds was looked for
	unstable                  int      // reads of the source that moved under the reader
}

// bcInfo is a BytecodeArray read before, the same while its length and
// position table pointer read the same.
type bcInfo struct {
	length, positionsPtr uint64
	positions            []byte
	code                 []byte // read for baseline frames only
	lines                map[uint64]uint32
}

// NewReader returns a Reader that reads target memory with read, which
// must fail (return false) rather than fault on a bad address.
func NewReader(read func(pid uint32, addr uint64, buf []byte) bool) *Reader {
	return &Reader{read: read, procs: map[uint32]*proc{}, ids: map[string]uint64{},
		frames: make([]format.JITFrame, 0, MaxDepth)}
}

// Attach says that process pid runs V8 with layout l; anon reports
// whether an address lies in its anonymous executable memory (where V8
// puts the code it compiles).
func (r *Reader) Attach(pid uint32, l *Layout, anon func(pc uint64) bool) {
	r.procs[pid] = &proc{l: l, anon: anon, miss: map[uint64]uint32{}, types: map[uint64]uint16{},
		sfis: map[uint64]*sfiInfo{}, srcs: map[uint64]*scriptInfo{}, bcs: map[uint64]*bcInfo{}}
}

// AddText says that [start, end) of pid maps the runtime's binary
// executable: its embedded builtins, where interpreted frames run.
func (r *Reader) AddText(pid uint32, start, end uint64) {
	if p := r.procs[pid]; p != nil {
		p.text = append(p.text, [2]uint64{start, end})
	}
}

// Any reports whether some process runs V8.
func (r *Reader) Any() bool { return len(r.procs) > 0 }

// Attached reports whether pid runs V8.
func (r *Reader) Attached(pid uint32) bool { return r.procs[pid] != nil }

// Forget drops what is known of pid (it exited or exec'd).
func (r *Reader) Forget(pid uint32) { delete(r.procs, pid) }

// Frames returns the JavaScript frames of a thread of pid whose registers
// were regs and whose stack is st, leaf first, and the functions met for
// the first time (ids numbered from 1 across the Reader). Both are valid
// until the next call. It names each frame V8 ran: an interpreted frame
// from its function and bytecode offset slots, compiled code (Sparkplug,
// Maglev, TurboFan) from the code object its pc is in, with the functions
// inlined there expanded. Native frames get none. A frame that fails a
// check gets none, and the reason is counted.
//
// pcs, when not empty, is the thread's native stack as the session
// unwound it (leaf first; kernel frames are skipped): each frame's frame
// pointer is then the one its callee saved below the return address (V8's
// frames and builtins all keep frame pointers), found in the stack, so a
// leaf in code without frame pointers (libc's futex wait) does not hide
// the JavaScript under it. Without pcs the frame pointer chain is followed
// from regs.
func (r *Reader) Frames(pid uint32, regs Regs, st Stack, pcs []uint64) ([]format.JITFrame, []format.JITFunc) {
	p := r.procs[pid]
	r.frames, r.fresh = r.frames[:0], r.fresh[:0]
	if p == nil {
		return nil, nil
	}
	if len(pcs) == 0 {
		r.byFP(p, pid, regs, st)
	} else if !r.byPCs(p, pid, regs, st, pcs) {
		// A return address beyond the stack copy (a short eBPF window):
		// the frame pointer chain from the registers may name more.
		r.alt = append(r.alt[:0], r.frames...)
		r.frames = r.frames[:0]
		r.byFP(p, pid, regs, st)
		if len(r.frames) < len(r.alt) {
			r.frames = append(r.frames[:0], r.alt...)
		}
	}
	if len(r.frames) > 0 {
		r.Stats.Stacks++
		r.Stats.Frames += uint64(len(r.frames))
	}
	return r.frames, r.fresh
}

// kernelStart is where x86-64 kernel addresses begin: a native stack's
// kernel frames are not the thread's.
const kernelStart = 0xffff800000000000

// byPCs names the frames of the native stack pcs; false when it could not
// follow them to the end.
func (r *Reader) byPCs(p *proc, pid uint32, regs Regs, st Stack, pcs []uint64) bool {
	pos := regs.SP
	leaf := true
	w := r.tmp[:8]
	for i, pc := range pcs {
		if pc >= kernelStart {
			continue
		}
		if i >= MaxDepth {
			r.Stats.Cut[CutDepth]++
			return true
		}
		if leaf {
			leaf = false
			if pc == regs.PC {
				r.frame(p, pid, pc, regs.FP, true, st)
				continue
			}
		}
		at, ok := r.find(pid, st, pos, pc)
		if !ok || !r.stack(pid, st, at-8, w) {
			r.Stats.Cut[CutStack]++
			return false
		}
		pos = at + 8
		r.frame(p, pid, pc, le64(w, 0), false, st)
	}
	return true
}

// find returns the address, at or above from, of the first stack word
// holding ret: where the call that returns to ret saved its return
// address.
func (r *Reader) find(pid uint32, st Stack, from, ret uint64) (uint64, bool) {
	return st.Find(r.read, pid, r.scan[:], from, ret, maxFrameSize)
}

// byFP follows the frame pointer chain from regs.
func (r *Reader) byFP(p *proc, pid uint32, regs Regs, st Stack) {
	pc, fp := regs.PC, regs.FP
	w := r.tmp[:16]
	for depth := 0; ; depth++ {
		if depth == MaxDepth {
			r.Stats.Cut[CutDepth]++
			break
		}
		r.frame(p, pid, pc, fp, depth == 0, st)
		if fp == 0 || !r.stack(pid, st, fp, w) {
			break
		}
		next, ret := le64(w, 0), le64(w, 8)
		if next <= fp || next-fp > maxFrameSize || ret == 0 {
			break
		}
		pc, fp = ret, next
	}
}

// stack reads the stack at addr into b: from the copy, or from the
// process when st.Live.
func (r *Reader) stack(pid uint32, st Stack, addr uint64, b []byte) bool {
	return st.Read(r.read, pid, addr, b)
}

func (p *proc) inText(pc uint64) bool {
	for _, t := range p.text {
		if pc >= t[0] && pc < t[1] {
			return true
		}
	}
	return false
}

// frame appends the frames of the native frame at pc whose frame pointer
// is fp, if V8 ran it.
func (r *Reader) frame(p *proc, pid uint32, pc, fp uint64, leaf bool, st Stack) {
	if p.anon != nil && p.anon(pc) {
		ci := r.codeAt(p, pid, pc)
		if ci == nil {
			return
		}
		switch ci.tier {
		case format.JITTierOptimized:
			off := pc - ci.start
			if !leaf && off > 0 {
				off-- // a return address: the call is before it
			}
			r.optimized(p, pid, ci, pc, off)
			return
		case format.JITTierBaseline:
			r.baseline(p, pid, ci, pc, fp, leaf, st)
			return
		}
		if ci.kind != 2 { // not a builtin copied into the code space (--interpreted-frames-native-stack)
			return
		}
	} else if !p.inText(pc) {
		return
	}
	r.interpreted(p, pid, pc, fp, st)
}

// slots reads the frame's fixed slots below fp: context (or frame type
// marker), function, bytecode array, bytecode offset.
func (r *Reader) slots(p *proc, pid uint32, fp uint64, st Stack) (ctx, fn, bc, off uint64, ok bool) {
	l := p.l
	lo := min(l.fpContext, l.fpFunction, l.fpBytecodeArray, l.fpBytecodeOffset)
	if lo >= 0 || -lo > 256 || uint64(-lo) > fp {
		return 0, 0, 0, 0, false
	}
	b := r.buf[:-lo]
	if !r.stack(pid, st, fp-uint64(-lo), b) {
		return 0, 0, 0, 0, false
	}
	at := func(o int64) uint64 { return le64(b, uint64(o-lo)) }
	return at(l.fpContext), at(l.fpFunction), at(l.fpBytecodeArray), at(l.fpBytecodeOffset), true
}

// interpreted appends the frame at fp if it is an interpreter (Ignition)
// frame: a context (not a frame type marker), a JSFunction whose
// SharedFunctionInfo runs the BytecodeArray of the frame, and a bytecode
// offset inside it.
func (r *Reader) interpreted(p *proc, pid uint32, pc, fp uint64, st Stack) {
	ctx, fn, bcp, off, ok := r.slots(p, pid, fp, st)
	if !ok || isSMI(ctx) || !isHeap(fn) || !isHeap(bcp) || !isSMI(off) {
		return
	}
	bc := r.bytecode(p, pid, bcp)
	if bc == nil {
		return
	}
	s, data := r.function(p, pid, fn)
	if s == nil {
		return
	}
	if data != bcp && r.typeOf(p, pid, data) == p.l.typeBytecodeArray {
		r.Stats.Cut[CutType]++ // the function runs other bytecode: not its frame
		return
	}
	o := int64(smi(off)) - int64(p.l.bcData-heapObjectTag)
	if o < 0 || uint64(o) >= bc.length {
		r.Stats.Cut[CutPosition]++
		return
	}
	line, ok := bc.lines[uint64(o)]
	if !ok {
		line = r.lineOf(p, pid, s, decodePosition(bc.positions, uint64(o)))
		bc.lines[uint64(o)] = line
	}
	r.frames = append(r.frames, format.JITFrame{PC: pc, Func: s.fn, Line: line, Tier: format.JITTierInterpreted})
}

// function reads the SharedFunctionInfo of the JSFunction fn (tagged),
// and its function_data.
func (r *Reader) function(p *proc, pid uint32, fn uint64) (*sfiInfo, uint64) {
	w := r.tmp[:8]
	if !r.read(pid, fn-heapObjectTag+p.l.jsfShared, w) {
		r.Stats.Cut[CutRead]++
		return nil, 0
	}
	return r.sfi(p, pid, le64(w, 0))
}

// sfi returns the SharedFunctionInfo at ptr (tagged), read or taken from
// the cache after a check, and its function_data; nil when ptr is not
// one.
func (r *Reader) sfi(p *proc, pid uint32, ptr uint64) (*sfiInfo, uint64) {
	l := p.l
	if !isHeap(ptr) {
		r.Stats.Cut[CutType]++
		return nil, 0
	}
	n := max(l.sfiNameOrScope, l.sfiScript, l.sfiFunctionData, l.mapOff) + 8
	b := r.buf[:n]
	if !r.read(pid, ptr-heapObjectTag, b) {
		r.Stats.Cut[CutRead]++
		return nil, 0
	}
	if r.typeOfMap(p, pid, le64(b, l.mapOff)) != l.typeSFI {
		r.Stats.Cut[CutType]++
		return nil, 0
	}
	nos, script, data := le64(b, l.sfiNameOrScope), le64(b, l.sfiScript), le64(b, l.sfiFunctionData)
	if s := p.sfis[ptr]; s != nil && s.nameOrScope == nos && s.script == script {
		return s, data
	}
	s := &sfiInfo{nameOrScope: nos, script: script}
	name := r.functionName(p, pid, nos)
	file := ""
	if isHeap(script) && r.typeOf(p, pid, script) == l.typeScript {
		if s.src = r.script(p, pid, script); s.src != nil {
			file = s.src.file
		}
	}
	s.fn = r.intern(name, file)
	if len(p.sfis) >= maxCodes {
		clear(p.sfis)
	}
	p.sfis[ptr] = s
	return s, data
}

// intern returns the JITFunc id of (name, file), defining it when new.
func (r *Reader) intern(name, file string) uint64 {
	r.key = append(append(append(r.key[:0], name...), 0), file...)
	if id, ok := r.ids[string(r.key)]; ok {
		return id
	}
	id := uint64(len(r.ids) + 1)
	r.ids[string(r.key)] = id
	r.Stats.Funcs++
	r.fresh = append(r.fresh, format.JITFunc{ID: id, Runtime: format.JITRuntimeV8, Name: name, File: file})
	return id
}

// functionName reads a function's name from its name_or_scope_info: a
// String, or a ScopeInfo whose function variable (or inferred name) slot
// follows the context locals. Unnamed functions are "(anonymous)", as
// V8's profiler calls them.
func (r *Reader) functionName(p *proc, pid uint32, nos uint64) string {
	l := p.l
	if !isHeap(nos) {
		return "(anonymous)"
	}
	t := r.typeOf(p, pid, nos)
	if t < l.firstNonString {
		if s, ok := r.str(p, pid, nos, t, maxName, 0); ok && s != "" {
			return s
		}
		return "(anonymous)"
	}
	if t != l.typeScopeInfo {
		return "(anonymous)"
	}
	base := nos - heapObjectTag + l.mapOff + 8 // the ScopeInfo's first slot
	w := r.tmp[:8]
	if !r.read(pid, base+8*l.scopeNContext, w) || !isSMI(le64(w, 0)) {
		return "(anonymous)"
	}
	n := smi(le64(w, 0))
	idx := l.scopeFirstVars + 2*uint64(n)
	if n >= 75 { // kScopeInfoMaxInlinedLocalNamesSize: the names are in one hash table
		idx = l.scopeFirstVars + 1 + uint64(n)
	}
	if n > 1<<16 {
		return "(anonymous)"
	}
	b := r.buf[:24]
	if !r.read(pid, base+8*idx, b) {
		return "(anonymous)"
	}
	// The function variable's name (a String, or 0), its slot (a SMI),
	// then the inferred name (a String or undefined): the first string.
	for i := uint64(0); i < 3; i++ {
		v := le64(b, 8*i)
		if !isHeap(v) {
			continue
		}
		if t := r.typeOf(p, pid, v); t < l.firstNonString {
			if s, ok := r.str(p, pid, v, t, maxName, 0); ok && s != "" {
				return s
			}
		}
	}
	return "(anonymous)"
}

// bytecode returns the BytecodeArray at ptr (tagged) with its position
// table, or nil.
func (r *Reader) bytecode(p *proc, pid uint32, ptr uint64) *bcInfo {
	l := p.l
	b := r.buf[:l.bcPositions+8]
	if !r.read(pid, ptr-heapObjectTag, b) {
		r.Stats.Cut[CutRead]++
		return nil
	}
	if r.typeOfMap(p, pid, le64(b, l.mapOff)) != l.typeBytecodeArray || !isSMI(le64(b, l.arrayLength)) {
		r.Stats.Cut[CutType]++
		return nil
	}
	length, pos := uint64(smi(le64(b, l.arrayLength))), le64(b, l.bcPositions)
	if bc := p.bcs[ptr]; bc != nil && bc.length == length && bc.positionsPtr == pos {
		return bc
	}
	if length == 0 || length > maxTable {
		r.Stats.Cut[CutPosition]++
		return nil
	}
	bc := &bcInfo{length: length, positionsPtr: pos, lines: map[uint64]uint32{}}
	// Lazy source positions: a table not collected yet is not a
	// ByteArray; its frames get the function and no line.
	if isHeap(pos) && r.typeOf(p, pid, pos) == l.typeByteArray {
		bc.positions, _ = r.byteArray(p, pid, pos)
	}
	if len(p.bcs) >= maxCodes {
		clear(p.bcs)
	}
	p.bcs[ptr] = bc
	return bc
}

// byteArray reads a ByteArray's bytes.
func (r *Reader) byteArray(p *proc, pid uint32, ptr uint64) ([]byte, bool) {
	l := p.l
	w := r.tmp[:8]
	if !r.read(pid, ptr-heapObjectTag+l.arrayLength, w) || !isSMI(le64(w, 0)) {
		return nil, false
	}
	n := uint64(smi(le64(w, 0)))
	if n > maxTable {
		return nil, false
	}
	b := make([]byte, n)
	if n > 0 && !r.read(pid, ptr-heapObjectTag+l.arrayData, b) {
		return nil, false
	}
	return b, true
}

// fixedArray reads up to max elements of a FixedArray (or a
// WeakFixedArray: the same layout).
func (r *Reader) fixedArray(p *proc, pid uint32, ptr uint64, max uint64) ([]uint64, bool) {
	l := p.l
	w := r.tmp[:8]
	if !r.read(pid, ptr-heapObjectTag+l.arrayLength, w) || !isSMI(le64(w, 0)) {
		return nil, false
	}
	n := min(uint64(smi(le64(w, 0))), max)
	b := make([]byte, 8*n)
	if n > 0 && !r.read(pid, ptr-heapObjectTag+l.arrayData, b) {
		return nil, false
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = le64(b, uint64(8*i))
	}
	return out, true
}

// typeOf returns the instance type of the heap object at ptr (tagged),
// noType when it cannot be read.
func (r *Reader) typeOf(p *proc, pid uint32, ptr uint64) uint16 {
	w := r.tmp[:8]
	if !isHeap(ptr) || !r.read(pid, ptr-heapObjectTag+p.l.mapOff, w) {
		return noType
	}
	return r.typeOfMap(p, pid, le64(w, 0))
}

// noType is what typeOf and typeOfMap return for an object or map they
// could not read: not 0, which is a string type (V8's internalized
// two-byte string), so that an unreadable source was read as two-byte
// characters, every line of a run then wrong.
const noType = 0xffff

// typeOfMap returns the instance type a Map (tagged) gives its objects.
// The maps of the objects read here are read-only roots: their types are
// cached.
func (r *Reader) typeOfMap(p *proc, pid uint32, m uint64) uint16 {
	if !isHeap(m) {
		return noType
	}
	if t, ok := p.types[m]; ok {
		return t
	}
	w := r.tmp[:2]
	if !r.read(pid, m-heapObjectTag+p.l.instanceType, w) {
		return noType
	}
	t := binary.LittleEndian.Uint16(w)
	if len(p.types) < 4096 {
		p.types[m] = t
	}
	return t
}

// codeAt returns the code object whose instructions hold pc, from the
// cache after checking its header, or found anew.
func (r *Reader) codeAt(p *proc, pid uint32, pc uint64) *codeInfo {
	i := sort.Search(len(p.codes), func(i int) bool { return p.codes[i].end > pc })
	if i < len(p.codes) && p.codes[i].start <= pc {
		ci := p.codes[i]
		h := r.tmp[:16]
		if r.read(pid, ci.is, h) && le64(h, p.l.mapOff) == p.isMap && le64(h, p.l.isCode) == ci.code {
			return ci
		}
		p.codes = append(p.codes[:i], p.codes[i+1:]...) // freed or moved
	}
	// A pc looked for in vain is looked for again after retryMiss
	// samples: code V8 was still writing (or moving) when first met
	// is found then, and anonymous code that is not V8's costs a scan
	// per retryMiss samples.
	if n, ok := p.miss[pc]; ok && n < retryMiss {
		p.miss[pc] = n + 1
		return nil
	}
	ci := r.findCode(p, pid, pc)
	if ci == nil {
		if len(p.miss) >= maxCodes {
			clear(p.miss)
		}
		p.miss[pc] = 0
		return nil
	}
	delete(p.miss, pc)
	if len(p.codes) >= maxCodes {
		p.codes = p.codes[:0]
	}
	i = sort.Search(len(p.codes), func(i int) bool { return p.codes[i].start >= ci.start })
	p.codes = append(p.codes, nil)
	copy(p.codes[i+1:], p.codes[i:])
	p.codes[i] = ci
	return ci
}

// findCode looks backwards from pc for the header of the
// InstructionStream holding it: its map word, then a pointer to its Code,
// whose instruction start is the stream's body and whose size covers pc.
// Headers are word-aligned; the body starts isHeader bytes in.
func (r *Reader) findCode(p *proc, pid uint32, pc uint64) *codeInfo {
	l := p.l
	blk := r.scan[:]
	end := pc &^ 7
	for scanned := uint64(0); scanned < maxCodeScan && end > uint64(len(blk)); scanned += uint64(len(blk)) {
		start := end - uint64(len(blk))
		if !r.read(pid, start, blk) {
			r.Stats.Cut[CutRead]++
			return nil
		}
		for off := len(blk) - 8; off >= 0; off -= 8 {
			w := le64(blk, uint64(off))
			if !isHeap(w) || p.isMap != 0 && w != p.isMap {
				continue
			}
			is := start + uint64(off)
			if p.isMap == 0 && r.typeOfMap(p, pid, w) != l.typeIS {
				continue
			}
			if ci := r.readCode(p, pid, is, w, pc); ci != nil {
				p.isMap = w
				return ci
			}
		}
		end = start
	}
	r.Stats.Cut[CutCode]++
	return nil
}

// readCode reads the code object of the InstructionStream at is (whose
// map is isMap) and checks that it runs pc.
func (r *Reader) readCode(p *proc, pid uint32, is, isMap, pc uint64) *codeInfo {
	l := p.l
	h := r.tmp[:8]
	if !r.read(pid, is+l.isCode, h) {
		return nil
	}
	code := le64(h, 0)
	if !isHeap(code) {
		return nil
	}
	b := make([]byte, l.codeSize+4)
	if !r.read(pid, code-heapObjectTag, b) || r.typeOfMap(p, pid, le64(b, l.mapOff)) != l.typeCode {
		return nil
	}
	start, size := le64(b, l.codeStart), uint64(binary.LittleEndian.Uint32(b[l.codeSize:]))
	if le64(b, l.codeStream) != is+heapObjectTag || start != is+l.isHeader || size == 0 || size > 64<<20 || pc < start || pc >= start+size {
		return nil
	}
	ci := &codeInfo{start: start, end: start + size, is: is, code: code,
		kind: (binary.LittleEndian.Uint32(b[l.codeFlags:]) & l.kindMask) >> l.kindShift, lines: map[uint64][]frameLine{}}
	switch {
	case ci.kind == l.kindBaseline:
		ci.tier = format.JITTierBaseline
		ci.bytecode = le64(b, l.codeDeopt) // bytecode_or_interpreter_data
		ci.positions, _ = r.tableAt(p, pid, le64(b, l.codePositions))
	case ci.kind > l.kindBaseline && ci.kind <= l.kindBaseline+2: // MAGLEV, TURBOFAN
		if r.readOptimized(p, pid, ci, le64(b, l.codeDeopt), le64(b, l.codePositions)) {
			ci.tier = format.JITTierOptimized
		}
	}
	return ci
}

// tableAt reads the ByteArray at ptr (tagged) after checking its type.
func (r *Reader) tableAt(p *proc, pid uint32, ptr uint64) ([]byte, bool) {
	if !isHeap(ptr) || r.typeOf(p, pid, ptr) != p.l.typeByteArray {
		return nil, false
	}
	return r.byteArray(p, pid, ptr)
}

// readOptimized reads what names an optimized code object's frames: its
// source positions, and from its deoptimization data the function it
// compiled, the functions inlined into it and where.
func (r *Reader) readOptimized(p *proc, pid uint32, ci *codeInfo, deopt, positions uint64) bool {
	l := p.l
	var ok bool
	if ci.positions, ok = r.tableAt(p, pid, positions); !ok {
		r.Stats.Cut[CutType]++
		return false
	}
	if !isHeap(deopt) || r.typeOf(p, pid, deopt) != l.typeFixedArray {
		r.Stats.Cut[CutType]++
		return false
	}
	d, ok := r.fixedArray(p, pid, deopt, max(l.deoptInlining, l.deoptSFI, l.deoptLiterals, l.deoptInlinedCount)+1)
	if !ok || uint64(len(d)) <= max(l.deoptInlining, l.deoptSFI, l.deoptLiterals, l.deoptInlinedCount) {
		r.Stats.Cut[CutType]++
		return false
	}
	if ci.sfi, _ = r.sfi(p, pid, d[l.deoptSFI]); ci.sfi == nil {
		return false
	}
	count := d[l.deoptInlinedCount]
	if !isSMI(count) || smi(count) < 0 || smi(count) > maxInlined {
		r.Stats.Cut[CutType]++
		return false
	}
	n := uint64(smi(count))
	if n == 0 {
		return true
	}
	lits := d[l.deoptLiterals]
	if t := r.typeOf(p, pid, lits); t != l.typeFixedArray && (l.typeWeakFixedArray == 0 || t != l.typeWeakFixedArray) {
		r.Stats.Cut[CutType]++
		return false
	}
	fns, ok := r.fixedArray(p, pid, lits, n)
	if !ok || uint64(len(fns)) < n {
		r.Stats.Cut[CutRead]++
		return false
	}
	ci.inlined = make([]*sfiInfo, n)
	for i, f := range fns {
		if ci.inlined[i], _ = r.sfi(p, pid, f&^weakTag); ci.inlined[i] == nil {
			return false
		}
	}
	if ci.inlining, ok = r.tableAt(p, pid, d[l.deoptInlining]); !ok {
		r.Stats.Cut[CutType]++
		return false
	}
	return true
}

// optimized appends the frames of optimized code ci at offset off of its
// instructions: the innermost inlined function first, its callers'
// positions from the inlining table, the compiled function last.
func (r *Reader) optimized(p *proc, pid uint32, ci *codeInfo, pc, off uint64) {
	lines, ok := ci.lines[off]
	if !ok {
		r.lines = r.lines[:0]
		pos := decodePosition(ci.positions, off)
		for depth := 0; pos.inliningID() != 0; depth++ {
			id := pos.inliningID()
			e := uint64(id-1) * inliningSize
			if depth > maxInlined || e+inliningSize > uint64(len(ci.inlining)) {
				r.Stats.Cut[CutPosition]++
				return
			}
			s := ci.sfi
			if fid := int32(binary.LittleEndian.Uint32(ci.inlining[e+8:])); fid >= 0 {
				if int(fid) >= len(ci.inlined) {
					r.Stats.Cut[CutPosition]++
					return
				}
				s = ci.inlined[fid]
			}
			r.lines = append(r.lines, frameLine{fn: s.fn, line: r.lineOf(p, pid, s, pos)})
			pos = sourcePosition(le64(ci.inlining, e))
			if pos.inliningID() >= id {
				r.Stats.Cut[CutPosition]++
				return
			}
		}
		r.lines = append(r.lines, frameLine{fn: ci.sfi.fn, line: r.lineOf(p, pid, ci.sfi, pos)})
		lines = append([]frameLine(nil), r.lines...)
		if len(ci.lines) < 4096 {
			ci.lines[off] = lines
		}
	}
	for i, fl := range lines {
		r.frames = append(r.frames, format.JITFrame{PC: pc, Func: fl.fn, Line: fl.line, Tier: ci.tier, Inlined: i < len(lines)-1})
	}
}

// baseline appends the frame of Sparkplug code ci: its function from the
// frame's function slot, its line from the bytecode its pc maps to.
func (r *Reader) baseline(p *proc, pid uint32, ci *codeInfo, pc, fp uint64, leaf bool, st Stack) {
	_, fn, _, _, ok := r.slots(p, pid, fp, st)
	if !ok || !isHeap(fn) {
		r.Stats.Cut[CutStack]++
		return
	}
	s, _ := r.function(p, pid, fn)
	if s == nil {
		return
	}
	bc := r.bytecode(p, pid, ci.bytecode)
	line := uint32(lineUnknown)
	if bc != nil {
		off := pc - ci.start
		if !leaf && off > 0 {
			off--
		}
		if o, ok := r.baselineOffset(p, pid, ci, bc, ci.bytecode, off); ok {
			if l, seen := bc.lines[o]; seen {
				line = l
			} else {
				line = r.lineOf(p, pid, s, decodePosition(bc.positions, o))
				bc.lines[o] = line
			}
		}
	}
	r.frames = append(r.frames, format.JITFrame{PC: pc, Func: s.fn, Line: line, Tier: format.JITTierBaseline})
}

// baselineOffset maps an offset in baseline code to the bytecode it runs:
// the code's bytecode offset table holds, per bytecode in order, the
// length of its machine code (unsigned VLQs); the bytecodes' own lengths
// come from kBytecodeSizes.
func (r *Reader) baselineOffset(p *proc, pid uint32, ci *codeInfo, bc *bcInfo, ptr, pcOff uint64) (uint64, bool) {
	sizes := p.l.bytecodeSizes
	if sizes == nil || ci.positions == nil {
		return 0, false
	}
	if bc.code == nil {
		bc.code = make([]byte, bc.length)
		if !r.read(pid, ptr-heapObjectTag+p.l.bcData, bc.code) {
			bc.code = nil
			return 0, false
		}
	}
	count := len(sizes) / 3
	var pcAt, bcAt uint64
	t := ci.positions
	for len(t) > 0 && bcAt < uint64(len(bc.code)) {
		n, k := binary.Uvarint(t) // V8's VLQ is LEB128
		if k <= 0 {
			return 0, false
		}
		t = t[k:]
		pcAt += n
		if pcAt > pcOff {
			return bcAt, true
		}
		op, scale, prefix := int(bc.code[bcAt]), 0, uint64(0)
		switch op {
		case 0, 2: // Wide, DebugBreakWide
			scale, prefix = 1, 1
		case 1, 3: // ExtraWide, DebugBreakExtraWide
			scale, prefix = 2, 1
		}
		if prefix == 1 {
			if bcAt+1 >= uint64(len(bc.code)) {
				return 0, false
			}
			op = int(bc.code[bcAt+1])
		}
		if op >= count {
			return 0, false
		}
		bcAt += prefix + uint64(sizes[scale*count+op])
	}
	return 0, false
}

func le64(b []byte, off uint64) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

func isHeap(v uint64) bool { return v&heapObjectMask == heapObjectTag && v > 0xffff }
func isSMI(v uint64) bool  { return v&1 == 0 }
func smi(v uint64) int32   { return int32(int64(v) >> 32) }
