package cpython

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"

	"github.com/rawstack/rawstack/format"
)

// Limits of one read. A chain deeper than MaxDepth is cut there (and
// counted); names, file names and line tables longer than these are not
// read (the code object is taken as invalid).
const (
	MaxDepth     = 128
	maxString    = 4096
	maxLineTable = 1 << 16
	// A thread that has no thread state stays known as such for a while
	// before the lists are walked again for it: firstMiss (ns) after the
	// first miss, twice as long after each further one, up to retryMiss.
	// A thread met before its interpreter made its state (the main thread
	// during start-up, a new thread before it binds its state) is found
	// within about twice the time it took; a thread that never runs
	// Python costs a walk every retryMiss once it has backed off.
	firstMiss  = 1e6
	gilRetry   = 10e6 // ns between looks for the GIL of a thread found without one
	retryMiss  = 200e6
	maxThreads = 4096 // thread states walked at most, per search
)

// Reasons a chain was cut, counted in [Stats].
const (
	CutRead     = iota // target memory could not be read (it moved, or the thread exited)
	CutCodeType        // a frame's code object is not of type code
	CutOffset          // an instruction offset outside the code, or a line out of range
	CutLoop            // a frame seen twice in one chain
	CutDepth           // deeper than MaxDepth
	CutString          // a name, file name or line table that could not be read
	nCuts
)

// Stats counts what a Reader did.
type Stats struct {
	Stacks uint64        // samples given Python frames
	Frames uint64        // Python frames given
	Codes  uint64        // distinct code objects interned
	Cut    [nCuts]uint64 // chains cut, by reason
	// Remembered counts frames read at the sample (FramesRaw) whose
	// code object could no longer be read, named from its last reading.
	Remembered uint64
}

// Reader reads the Python frames of sampled threads out of their
// processes' memory. It is used from one goroutine.
type Reader struct {
	shim  bool // the code object code() returned last is a shim (codeEntry.shim)
	read  func(pid uint32, addr uint64, buf []byte) bool
	read2 func(pid uint32, a1 uint64, n1 int, a2 uint64, n2 int, buf []byte) int
	procs map[uint32]*proc
	ids   map[string]uint64 // code contents → PyCode id
	Stats Stats
	// onProcess, when set, learns each process attached (SetOnProcess);
	// onThread each thread state found (SetOnThread).
	onProcess func(pid uint32, w Walk)
	onThread  func(pid, tid uint32, tstate, gil uint64)
	// NSTid, if set, gives the id thread tid of pid has in the process's
	// own pid namespace, the one its thread states record
	// (native_thread_id, glibc's pthread tid): a process in a container
	// numbers its threads from 1.
	NSTid func(pid, tid uint32) uint32
	// GIL is the hold on the GIL of the thread of the last Frames call:
	// PyGILHeld when the GIL was locked with the thread's state as its
	// last holder as the frames were read, PyGILNone otherwise.
	GIL format.PyGIL

	buf    [512]byte
	frame  [256]byte
	pair   [768]byte
	frames []format.PyFrame
	fresh  []format.PyCode
	seen   [MaxDepth]uint64
	key    []byte
}

type proc struct {
	in       *Interp
	runtime  uint64 // absolute address of _PyRuntime
	codeType uint64 // absolute address of PyCode_Type
	tstates  map[uint32]tstate
	codes    map[uint64]codeEntry // by code object address
}

type tstate struct {
	addr uint64 // 0: none found
	at   int64  // when a miss was recorded
	wait int64  // how long after at the lists are walked again (misses)
	gil  uint64 // absolute address of the GIL of the thread's interpreter, 0 unknown
}

// codeEntry is a code object read before; it is taken as the same object
// when the pointers to its name, file and table and its first line read
// the same (a code object is immutable; a new one at a reused address
// has other strings).
type codeEntry struct {
	qualname, filename, linetable uint64
	codeObj                       uint64 // 3.8–3.10: co_code
	firstLine                     uint32
	units                         uint64
	id                            uint64
	// shim: the interpreter's own entry code (3.12's "<interpreter
	// trampoline>"), whose frames belong to the C stack.
	shim bool
}

// NewReader returns a Reader that reads target memory with read, which
// must fail (return false) rather than fault on a bad address, and with
// read2, which reads n1 bytes at a1 then n2 at a2 (n2 may be 0) into
// buf[:n1+n2] in one go and returns how many bytes it read, stopping at
// the first range it cannot read.
func NewReader(read func(pid uint32, addr uint64, buf []byte) bool, read2 func(pid uint32, a1 uint64, n1 int, a2 uint64, n2 int, buf []byte) int) *Reader {
	return &Reader{read: read, read2: read2, procs: map[uint32]*proc{}, ids: map[string]uint64{},
		frames: make([]format.PyFrame, 0, MaxDepth), key: make([]byte, 0, 256)}
}

// Attach says that process pid runs interpreter in, loaded with bias
// (the absolute address of link-time address 0).
func (r *Reader) Attach(pid uint32, in *Interp, bias uint64) {
	r.procs[pid] = &proc{in: in, runtime: in.runtime + bias, codeType: in.codeType + bias,
		tstates: map[uint32]tstate{}, codes: map[uint64]codeEntry{}}
	if r.onProcess != nil {
		r.onProcess(pid, in.lay.walkOf(in.runtime+bias))
	}
}

// Attached reports whether pid has an interpreter.
func (r *Reader) Attached(pid uint32) bool { return r.procs[pid] != nil }

// Forget drops what is known of pid (it exited or exec'd).
func (r *Reader) Forget(pid uint32) {
	if r.procs[pid] != nil && r.onProcess != nil {
		r.onProcess(pid, Walk{}) // Runtime 0: the process is gone
	}
	delete(r.procs, pid)
}

// Frames returns the Python frames, leaf first, that thread tid of pid
// was running at time t (ns), and the code objects met for the first
// time (ids numbered from 1 across the Reader). Both are valid until the
// next call. A process with no interpreter, a thread with no thread
// state and a thread in no Python code give no frames. A chain that
// fails a check is cut there: the frames before the cut are returned.
func (r *Reader) Frames(pid, tid uint32, t int64) ([]format.PyFrame, []format.PyCode) {
	p := r.procs[pid]
	r.frames, r.fresh, r.GIL = r.frames[:0], r.fresh[:0], format.PyGILNone
	if p == nil {
		return nil, nil
	}
	l := &p.in.lay
	ts, known := p.tstates[tid]
	var frame uint64
	ok := false
	if ts.addr != 0 {
		if ts.gil == 0 && l.interpGIL != 0 && t-ts.at >= gilRetry {
			// 3.12+ creates the interpreter's GIL after the main
			// thread's state: a thread found before that has no GIL
			// yet, and kept none for the whole run (every sample's
			// GIL hold unknown). Look again now and then.
			ts.at = t
			if again := r.find(pid, tid, p, l); again.addr == ts.addr && again.gil != 0 {
				ts.gil = again.gil
				if r.onThread != nil {
					r.onThread(pid, tid, ts.addr, ts.gil)
				}
			}
			p.tstates[tid] = ts
		}
		frame, ok = r.current(pid, tid, l, ts)
	}
	if !ok {
		if known && ts.addr == 0 && t-ts.at < ts.wait {
			return nil, nil
		}
		wait := int64(firstMiss)
		if known && ts.addr == 0 {
			wait = min(2*ts.wait, retryMiss)
		}
		ts = r.find(pid, tid, p, l)
		ts.at, ts.wait = t, wait
		p.tstates[tid] = ts
		if ts.addr == 0 {
			return nil, nil
		}
		if r.onThread != nil {
			r.onThread(pid, tid, ts.addr, ts.gil)
		}
		if frame, ok = r.current(pid, tid, l, ts); !ok {
			return nil, nil
		}
	}
	r.walk(pid, p, l, frame)
	if len(r.frames) > 0 {
		r.Stats.Stacks++
		r.Stats.Frames += uint64(len(r.frames))
	}
	return r.frames, r.fresh
}

// WaitingGIL reports whether a thread of pid whose native stack is pcs
// (absolute, leaf first: the pc, then return addresses) is blocked taking
// the GIL: one of its frames is in the interpreter's take_gil. False when
// pid has no interpreter or its take_gil is not known (no symbols).
func (r *Reader) WaitingGIL(pid uint32, pcs []uint64) bool {
	p := r.procs[pid]
	if p == nil || len(p.in.takeGIL) == 0 {
		return false
	}
	bias := p.runtime - p.in.runtime
	for i, pc := range pcs {
		if i > 0 {
			pc-- // a return address: the call is before it
		}
		for _, rg := range p.in.takeGIL {
			if pc-bias >= rg[0] && pc-bias < rg[1] {
				return true
			}
		}
	}
	return false
}

// current reads thread state ts and returns its current frame; false when
// ts is no longer tid's. The GIL's state is read with the thread state,
// in the same call, and sets r.GIL.
func (r *Reader) current(pid, tid uint32, l *layout, ts tstate) (uint64, bool) {
	n := max(l.tsNativeID, l.tsFrame, l.tsThreadID) + 8
	b := r.buf[:n]
	if ts.gil != 0 {
		lo, hi := min(l.gilHolder, l.gilLocked), max(l.gilHolder+8, l.gilLocked+4)
		g := r.buf[n : n+hi-lo]
		got := r.read2(pid, ts.addr, int(n), ts.gil+lo, int(hi-lo), r.buf[:n+hi-lo])
		if got < int(n) {
			return 0, false
		}
		if got == int(n+hi-lo) && le64(g, l.gilHolder-lo) == ts.addr && binary.LittleEndian.Uint32(g[l.gilLocked-lo:]) == 1 {
			r.GIL = format.PyGILHeld
		}
	} else if !r.read(pid, ts.addr, b) {
		return 0, false
	}
	if r.tidOf(pid, l, b) != uint64(r.nsTid(pid, tid)) {
		r.GIL = format.PyGILNone
		return 0, false
	}
	frame := le64(b, l.tsFrame)
	if l.viaCFrame && frame != 0 {
		if !r.read(pid, frame+l.cframeFrame, r.buf[:8]) {
			return 0, true
		}
		frame = le64(r.buf[:8], 0)
	}
	return frame, true
}

// nsTid is tid as the process numbers it (NSTid), tid itself without
// NSTid.
func (r *Reader) nsTid(pid, tid uint32) uint32 {
	if r.NSTid == nil {
		return tid
	}
	return r.NSTid(pid, tid)
}

// tidOf returns the kernel thread id of the thread state in b: its
// native_thread_id, or (3.8–3.10) the tid in the glibc struct pthread its
// thread_id points to.
func (r *Reader) tidOf(pid uint32, l *layout, b []byte) uint64 {
	if !l.legacy {
		return le64(b, l.tsNativeID)
	}
	var t [4]byte
	if !r.read(pid, le64(b, l.tsThreadID)+pthreadTidAMD64, t[:]) {
		return 0
	}
	return uint64(binary.LittleEndian.Uint32(t[:]))
}

// find walks every interpreter's thread list for tid's thread state, and
// finds the GIL of its interpreter.
func (r *Reader) find(pid, tid uint32, p *proc, l *layout) tstate {
	tid = r.nsTid(pid, tid)
	b := r.buf[:8]
	if !r.read(pid, p.runtime+l.interpretersHead, b) {
		return tstate{}
	}
	n := 0
	for interp := le64(b, 0); interp != 0 && n < maxThreads; n++ {
		if !r.read(pid, interp+l.threadsHead, b) {
			return tstate{}
		}
		for ts := le64(b, 0); ts != 0 && n < maxThreads; n++ {
			nb := r.buf[:max(l.tsNext, l.tsNativeID, l.tsThreadID)+8]
			if !r.read(pid, ts, nb) {
				return tstate{}
			}
			next := le64(nb, l.tsNext)
			if r.tidOf(pid, l, nb) == uint64(tid) {
				found := tstate{addr: ts}
				switch {
				case l.rtGIL != 0: // 3.8–3.11: one GIL, in the runtime
					found.gil = p.runtime + l.rtGIL
				case l.interpGIL != 0 && r.read(pid, interp+l.interpGIL, b): // 3.12+: the interpreter's
					found.gil = le64(b, 0)
				}
				return found
			}
			ts = next
		}
		// PyInterpreterState.next is the interpreter's first field.
		if !r.read(pid, interp, b) {
			return tstate{}
		}
		interp = le64(b, 0)
	}
	return tstate{}
}

// walk follows the chain from frame, appending validated frames. Each
// frame after the first costs one read: its code object's header and the
// previous frame are read together.
func (r *Reader) walk(pid uint32, p *proc, l *layout, frame uint64) {
	fb := r.frame[:l.frSpan]
	if !r.read(pid, frame, fb) {
		r.Stats.Cut[CutRead]++
		return
	}
	depth := 0
	for frame != 0 {
		if depth == MaxDepth {
			r.Stats.Cut[CutDepth]++
			return
		}
		for _, f := range r.seen[:depth] {
			if f == frame {
				r.Stats.Cut[CutLoop]++
				return
			}
		}
		r.seen[depth] = frame
		depth++
		prev := le64(fb, l.frPrevious)
		if !l.legacy && fb[l.frOwner] == ownedByCStack && l.frIsEntry == 0 {
			if n := len(r.frames); n > 0 {
				r.frames[n-1].Entry = true
			}
			frame = prev
			if frame != 0 && !r.read(pid, frame, fb) {
				r.Stats.Cut[CutRead]++
				return
			}
			continue
		}
		code, instr := le64(fb, l.frCode), le64(fb, l.frInstr)
		entry := l.legacy || l.frIsEntry != 0 && fb[l.frIsEntry] != 0
		lasti := int32(binary.LittleEndian.Uint32(fb[l.frLasti:]))
		next := l.frSpan
		if prev == 0 {
			next = 0
		}
		pair := r.pair[:l.coSpan+next]
		n := 0
		if code != 0 {
			n = r.read2(pid, code, int(l.coSpan), prev, int(next), pair)
		}
		if n < int(l.coSpan) {
			r.Stats.Cut[CutRead]++
			return
		}
		if !r.addFrame(pid, p, l, code, instr, lasti, entry, pair[:l.coSpan]) {
			return
		}
		frame = prev
		if frame != 0 {
			if n < len(pair) {
				r.Stats.Cut[CutRead]++
				return
			}
			copy(fb, pair[l.coSpan:])
		}
	}
}

// addFrame validates and appends the frame that ran code object code (its
// header in cb) at instr (3.11+) or lasti (3.8–3.10); false, with the
// cut counted, when it fails.
func (r *Reader) addFrame(pid uint32, p *proc, l *layout, code, instr uint64, lasti int32, entry bool, cb []byte) bool {
	id, units, cut := r.code(pid, p, l, code, cb)
	if cut >= 0 {
		r.Stats.Cut[cut]++
		return false
	}
	return r.addCode(l, code, instr, lasti, entry, id, units)
}

// addCode is addFrame for the code object at code, known as id, of units
// code units (r.shim says whether it is the interpreter's entry code).
func (r *Reader) addCode(l *layout, code, instr uint64, lasti int32, entry bool, id, units uint64) bool {
	if r.shim {
		// The C stack's entry frame, read while the interpreter was
		// writing it (its owner byte not yet FRAME_OWNED_BY_CSTACK):
		// no Python frame, as when the owner says so.
		if n := len(r.frames); n > 0 {
			r.frames[n-1].Entry = true
		}
		return true
	}
	start := code + l.coCode
	var off uint64
	switch {
	case l.legacy: // f_lasti; -1 before the first instruction
		if lasti > 0 {
			off = uint64(lasti)
		}
		if l.lastiUnits {
			off *= 2
		}
	case instr >= start:
		off = instr - start
	case instr+2 == start: // 3.11–3.12: prev_instr before the first instruction
	default:
		r.Stats.Cut[CutOffset]++
		return false
	}
	if off >= units*2 || off > 1<<32-1 {
		r.Stats.Cut[CutOffset]++
		return false
	}
	r.frames = append(r.frames, format.PyFrame{Code: id, Offset: uint32(off), Entry: entry})
	return true
}

// code returns the PyCode id and size in code units of the code object at
// addr, whose header cb holds, reading and interning it when it is new; cut is the reason it
// failed, or -1.
func (r *Reader) code(pid uint32, p *proc, l *layout, addr uint64, cb []byte) (id, units uint64, cut int) {
	if le64(cb, 8) != p.codeType { // PyObject.ob_type
		return 0, 0, CutCodeType
	}
	e := codeEntry{qualname: le64(cb, l.coQualname), filename: le64(cb, l.coFilename), linetable: le64(cb, l.coLinetable),
		firstLine: uint32(binary.LittleEndian.Uint32(cb[l.coFirstLine:]))}
	if l.legacy {
		e.codeObj = le64(cb, l.coCodeObj)
	} else {
		e.units = le64(cb, l.coSize)
	}
	if old, ok := p.codes[addr]; ok && old.qualname == e.qualname && old.filename == e.filename &&
		old.linetable == e.linetable && old.firstLine == e.firstLine && old.codeObj == e.codeObj && (l.legacy || old.units == e.units) {
		r.shim = old.shim
		return old.id, old.units, -1
	}
	if l.legacy { // the code's size: its co_code bytes object's
		h := r.buf[:l.bytesData]
		if e.codeObj == 0 || !r.read(pid, e.codeObj, h) {
			return 0, 0, CutRead
		}
		e.units = le64(h, l.bytesSize) / 2
	}
	if int32(e.firstLine) < 0 || e.firstLine > 1<<24 || e.units == 0 || e.units > 1<<26 {
		return 0, 0, CutOffset
	}
	name, ok1 := r.unicode(pid, l, e.qualname)
	file, ok2 := r.unicode(pid, l, e.filename)
	table, ok3 := r.bytesObject(pid, l, e.linetable)
	if !ok1 || !ok2 || !ok3 {
		return 0, 0, CutString
	}
	r.key = append(append(append(append(r.key[:0], name...), 0), file...), 0)
	r.key = strconv.AppendUint(r.key, uint64(e.firstLine), 10)
	r.key = append(append(r.key, 0), table...)
	if id, ok := r.ids[string(r.key)]; ok {
		e.id = id
	} else {
		e.id = uint64(len(r.ids) + 1)
		r.ids[string(r.key)] = e.id
		r.Stats.Codes++
		r.fresh = append(r.fresh, format.PyCode{ID: e.id, Name: name, File: file, FirstLine: e.firstLine,
			Table: l.table, Lines: table})
	}
	e.shim = name == "<interpreter trampoline>" || name == "<shim>"
	p.codes[addr] = e
	r.shim = e.shim
	return e.id, e.units, -1
}

// unicode reads a compact str object (every code object's names are).
func (r *Reader) unicode(pid uint32, l *layout, addr uint64) (string, bool) {
	h := make([]byte, l.uniCompactSize)
	if addr == 0 || !r.read(pid, addr, h) {
		return "", false
	}
	n := le64(h, l.uniLength)
	state := binary.LittleEndian.Uint32(h[l.uniState:])
	kind, compact, ascii := uint64(state>>2&7), state>>5&1 != 0, state>>6&1 != 0
	if !compact || n > maxString || (kind != 1 && kind != 2 && kind != 4) {
		return "", false
	}
	if ascii {
		b := make([]byte, n)
		if !r.read(pid, addr+l.uniASCIISize, b) {
			return "", false
		}
		return string(b), true
	}
	b := make([]byte, n*kind)
	if !r.read(pid, addr+l.uniCompactSize, b) {
		return "", false
	}
	out := make([]byte, 0, n*2)
	for i := uint64(0); i < n; i++ {
		var c rune
		switch kind {
		case 1:
			c = rune(b[i])
		case 2:
			c = rune(binary.LittleEndian.Uint16(b[2*i:]))
		case 4:
			c = rune(binary.LittleEndian.Uint32(b[4*i:]))
		}
		out = utf8.AppendRune(out, c)
	}
	return string(out), true
}

// bytesObject reads a bytes object's contents.
func (r *Reader) bytesObject(pid uint32, l *layout, addr uint64) ([]byte, bool) {
	h := make([]byte, l.bytesData)
	if addr == 0 || !r.read(pid, addr, h) {
		return nil, false
	}
	n := le64(h, l.bytesSize)
	if n > maxLineTable {
		return nil, false
	}
	b := make([]byte, n)
	if n > 0 && !r.read(pid, addr+l.bytesData, b) {
		return nil, false
	}
	return b, true
}

func le64(b []byte, off uint64) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

// Raw frames: a thread's frames as a sampler read them at the sample
// (the eBPF back end, in BPF), RawWords words per frame, leaf first: the
// code object's address, the instruction pointer (3.11+; f_lasti in the
// low 32 bits before), and the frame's owner byte | its is_entry byte <<
// 8 (the bytes at Walk's FrOwner and FrIsEntry, whatever they are when
// the version has no such field: the reader knows which apply).
const RawWords = 3

// Walk is what a sampler needs to read the Python frames of a process's
// threads itself (see [Reader.SetOnProcess]): where the runtime state is
// and the field offsets of the version. From Runtime it finds a thread's
// state as [Reader.Frames] does (interpreters, then each one's thread
// states, whose TSTid names the thread), the GIL (at Runtime+RTGIL, or
// pointed to from the interpreter at InterpGIL), then reads frames.
// Offsets that do not apply are NoOffset.
type Walk struct {
	Runtime                     uint64 // absolute address of _PyRuntime
	InterpretersHead            uint32 // in _PyRuntime; PyInterpreterState.next is at 0
	ThreadsHead, TSNext         uint32 // in PyInterpreterState; in PyThreadState
	RTGIL, InterpGIL            uint32 // the GIL in _PyRuntime (3.8–3.11), or its pointer in the interpreter (3.12+)
	TSFrame, CFrameFrame        uint32 // current frame (or cframe) in the thread state; current_frame in the cframe
	TSTid                       uint32 // native_thread_id (3.11+) or thread_id, a pthread_t (3.8–3.10: Legacy)
	FrCode, FrInstr, FrPrevious uint32
	FrOwner, FrIsEntry          uint32
	FrSize                      uint32 // bytes of a frame that hold those fields
	GILHolder, GILLocked        uint32
	Legacy                      bool
	PthreadTid                  uint32 // 3.8–3.10: the tid's offset in glibc's struct pthread
}

// NoOffset marks a Walk field that does not apply to the version.
const NoOffset = ^uint32(0)

// SetOnThread sets a function called each time the reader finds the
// thread state of thread tid of pid (and its interpreter's GIL, 0 if
// unknown): a sampler that reads frames at the sample but found no state
// for the thread itself learns it there.
func (r *Reader) SetOnThread(f func(pid, tid uint32, tstate, gil uint64)) { r.onThread = f }

// SetOnProcess sets a function called each time a process is attached,
// with how to read its threads' frames (a sampler that reads them at the
// sample, in BPF, learns the process there), and when it is forgotten,
// with a Walk whose Runtime is 0.
// Processes attached before it is set are told at once.
func (r *Reader) SetOnProcess(f func(pid uint32, w Walk)) {
	r.onProcess = f
	for pid, p := range r.procs {
		f(pid, p.in.lay.walkOf(p.runtime))
	}
}

func (l *layout) walkOf(runtime uint64) Walk {
	opt := func(v uint64, ok bool) uint32 {
		if !ok {
			return NoOffset
		}
		return uint32(v)
	}
	w := Walk{Runtime: runtime, InterpretersHead: uint32(l.interpretersHead), ThreadsHead: uint32(l.threadsHead), TSNext: uint32(l.tsNext),
		RTGIL: opt(l.rtGIL, l.rtGIL != 0), InterpGIL: opt(l.interpGIL, l.interpGIL != 0),
		TSFrame: uint32(l.tsFrame), CFrameFrame: opt(l.cframeFrame, l.viaCFrame),
		FrCode: uint32(l.frCode), FrPrevious: uint32(l.frPrevious), FrSize: uint32(l.frSpan),
		FrOwner: opt(l.frOwner, !l.legacy && l.frIsEntry == 0), FrIsEntry: opt(l.frIsEntry, l.frIsEntry != 0),
		GILHolder: uint32(l.gilHolder), GILLocked: uint32(l.gilLocked), Legacy: l.legacy}
	if l.legacy {
		w.TSTid, w.FrInstr, w.PthreadTid = uint32(l.tsThreadID), uint32(l.frLasti), pthreadTidAMD64
	} else {
		w.TSTid, w.FrInstr = uint32(l.tsNativeID), uint32(l.frInstr)
	}
	return w
}

// FramesRaw is Frames for a thread whose frames a sampler read at the
// sample (raw, RawWords words a frame, leaf first; cut says the sampler
// stopped at its own depth cap), with held its reading of the GIL: the
// code objects are validated and interned here, the offsets checked, as
// Frames does.
func (r *Reader) FramesRaw(pid uint32, raw []uint64, cut, held bool) ([]format.PyFrame, []format.PyCode) {
	p := r.procs[pid]
	r.frames, r.fresh, r.GIL = r.frames[:0], r.fresh[:0], format.PyGILNone
	if p == nil {
		return nil, nil
	}
	if held {
		r.GIL = format.PyGILHeld
	}
	l := &p.in.lay
	cb := r.pair[:l.coSpan]
	for i := 0; i+RawWords <= len(raw); i += RawWords {
		code, instr, flags := raw[i], raw[i+1], raw[i+2]
		if !l.legacy && l.frIsEntry == 0 && uint8(flags) == ownedByCStack {
			if n := len(r.frames); n > 0 {
				r.frames[n-1].Entry = true
			}
			continue
		}
		entry := l.legacy || l.frIsEntry != 0 && uint8(flags>>8) != 0
		if code != 0 && !r.read(pid, code, cb) {
			// The frames were read at the sample; the code object no
			// longer can be, most often because the process exited
			// before its last samples were drained. A code object read
			// before at that address names the frame: the same object
			// unless it was freed and its address reused since.
			if old, ok := p.codes[code]; ok {
				r.shim = old.shim
				if !r.addCode(l, code, instr, int32(instr), entry, old.id, old.units) {
					cut = false
					break
				}
				r.Stats.Remembered++
				continue
			}
			code = 0
		}
		if code == 0 {
			r.Stats.Cut[CutRead]++
			cut = false
			break
		}
		if !r.addFrame(pid, p, l, code, instr, int32(instr), entry, cb) {
			cut = false
			break
		}
	}
	if cut {
		r.Stats.Cut[CutDepth]++
	}
	if len(r.frames) > 0 {
		r.Stats.Stacks++
		r.Stats.Frames += uint64(len(r.frames))
	}
	return r.frames, r.fresh
}
