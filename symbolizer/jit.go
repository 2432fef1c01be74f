package symbolizer

import (
	"math"
	"sort"

	"github.com/rawstack/rawstack/format"
)

// JIT code: runtimes publish names for the code they generate in perf maps
// and jitdump files, which the recorder copies into the stream as JITCode
// and JITUnload events (format/SPEC.md §6.20). The same address may hold
// different code over time, so an address is named with the entry valid
// at the sample's time. Entries can arrive after the samples they name (a
// map written when the process exits), so samples whose stacks hold
// addresses outside file-backed modules are set aside while the stream is
// read and normalized at its end, when every entry is known.

// jitEntry is one JITCode event.
type jitEntry struct {
	start, end uint64
	t          int64
	until      int64 // end of validity: a later overlapping entry or unload
	seq        int   // arrival order, the tie-break between equal times
	name       uint64
	lines      []format.JITLine
}

type jitUnload struct {
	t          int64
	start, end uint64
}

// pidJIT is the JIT code of one process.
type pidJIT struct {
	entries []*jitEntry // by start once finalized
	unloads []jitUnload
	times   []int64 // every event time, sorted once finalized: epochs
	maxSize uint64
	module  *Module // the pseudo-module "[jit] NAME" its frames are in
}

// maxJITOverlaps caps the later entries compared with each entry when
// validities are computed.
const maxJITOverlaps = 4096

type jitDB struct {
	byPid map[uint32]*pidJIT
	seq   int
	final bool
}

func (j *jitDB) pid(pid uint32) *pidJIT {
	if j.byPid == nil {
		j.byPid = map[uint32]*pidJIT{}
	}
	p := j.byPid[pid]
	if p == nil {
		p = &pidJIT{}
		j.byPid[pid] = p
	}
	return p
}

func (j *jitDB) code(e *format.JITCode) {
	if e.Size == 0 || e.Addr+e.Size < e.Addr {
		return
	}
	p := j.pid(e.Pid)
	j.final = false // a stream's reader names code between events
	j.seq++
	en := &jitEntry{start: e.Addr, end: e.Addr + e.Size, t: e.Time, until: math.MaxInt64, seq: j.seq, name: e.Name}
	if len(e.Lines) > 0 {
		en.lines = append([]format.JITLine(nil), e.Lines...)
	}
	p.entries = append(p.entries, en)
	p.times = append(p.times, e.Time)
	if e.Size > p.maxSize {
		p.maxSize = e.Size
	}
}

func (j *jitDB) unload(e *format.JITUnload) {
	if e.Addr+e.Size < e.Addr {
		return
	}
	p := j.pid(e.Pid)
	j.final = false
	p.unloads = append(p.unloads, jitUnload{e.Time, e.Addr, e.Addr + e.Size})
	p.times = append(p.times, e.Time)
}

// finalize sorts each process's entries and computes how long each stays
// valid: until the first later entry that overlaps it, or an unload. It
// runs again after new events (each pass only shortens validities, so
// a second one over more entries gives what one pass over all would).
func (j *jitDB) finalize() {
	if j.final {
		return
	}
	j.final = true
	for _, p := range j.byPid {
		sort.Slice(p.times, func(a, b int) bool { return p.times[a] < p.times[b] })
		es := p.entries
		sort.SliceStable(es, func(a, b int) bool { return es[a].start < es[b].start })
		later := func(a, b *jitEntry) bool { return a.t < b.t || a.t == b.t && a.seq < b.seq }
		for i, a := range es {
			// Every overlapping pair is met once, from the entry that
			// starts first. Real maps overlap rarely (code reused at an
			// address); the cap keeps a hostile trace from making this
			// quadratic, at the price of validities it leaves open.
			for k := i + 1; k < len(es) && es[k].start < a.end && k-i <= maxJITOverlaps; k++ {
				b := es[k]
				if later(a, b) && b.t < a.until {
					a.until = b.t
				} else if later(b, a) && a.t < b.until {
					b.until = a.t
				}
			}
		}
		for _, u := range p.unloads {
			i := sort.Search(len(es), func(i int) bool { return es[i].start >= u.end })
			for k := i - 1; k >= 0 && (es[k].start >= u.start || u.start-es[k].start < p.maxSize); k-- {
				e := es[k]
				if e.start < u.end && u.start < e.end && e.t <= u.t && u.t < e.until {
					e.until = u.t
				}
			}
		}
	}
}

// epoch numbers the intervals between pid's JIT events: lookups for one
// address within one epoch give the same answer.
func (j *jitDB) epoch(pid uint32, t int64) int {
	p := j.byPid[pid]
	if p == nil {
		return 0
	}
	return sort.Search(len(p.times), func(i int) bool { return p.times[i] > t })
}

// lookup returns the entry naming addr of pid at time t (SPEC.md §6.20):
// the latest entry known at t and still valid then, else the earliest
// one published after t.
func (j *jitDB) lookup(pid uint32, addr uint64, t int64) *jitEntry {
	p := j.byPid[pid]
	if p == nil {
		return nil
	}
	es := p.entries
	i := sort.Search(len(es), func(i int) bool { return es[i].start > addr })
	var known, after *jitEntry
	for k := i - 1; k >= 0 && addr-es[k].start < p.maxSize; k-- {
		e := es[k]
		if addr >= e.end {
			continue
		}
		if e.t <= t {
			if t < e.until && (known == nil || e.t > known.t || e.t == known.t && e.seq > known.seq) {
				known = e
			}
		} else if e.until > e.t && (after == nil || e.t < after.t || e.t == after.t && e.seq > after.seq) {
			after = e
		}
	}
	if known != nil {
		return known
	}
	return after
}

// frames returns the frame of code entry e at addr (a return address
// already moved into its call): the runtime's name and, from jitdump
// debug info, the source position.
func (e *jitEntry) frame(addr uint64, strs map[uint64]string) Frame {
	f := Frame{Function: strs[e.name]}
	off := addr - e.start
	var best *format.JITLine
	for i := range e.lines {
		l := &e.lines[i]
		if l.Offset <= off && (best == nil || l.Offset >= best.Offset) {
			best = l
		}
	}
	if best != nil {
		f.File, f.Line, f.Column = strs[best.File], int(best.Line), int(best.Column)
	}
	return f
}

// jitCandidate reports whether pc of pid at t may be JIT code: no
// file-backed module covers it.
func (b *builder) jitCandidate(pid uint32, pc uint64, t int64) bool {
	m := b.db.Lookup(pid, pc, t)
	return m == nil || m.Kind == format.ModuleAnon || m.Kind == format.ModuleJIT
}

// pendingSample is a sample set aside until the JIT code is known.
type pendingSample struct {
	pid    uint32
	tid    uint32
	t      int64
	weight uint64
	flags  format.SampleFlags
	stack  uint64   // a Sample's stack id, or 0
	gen    uint64   // the module generation the stack was seen in
	pcs    []uint64 // an unwound RawStack's frames (kernel first)
	python uint64   // a Sample's PyStack id, or 0
	// a Sample's goroutine, label set and span link
	goid, labels uint64
	link         format.SpanLink
}

type jitStackKey struct {
	pid   uint32
	stack uint64
	gen   uint64
	epoch int
}

// deferStack reports whether a sample with these frames must wait for
// the end of the stream; the answer is cached with the stack's
// normalization key.
func (b *builder) deferStack(k stackKey, pcs []uint64, t int64) bool {
	if d, ok := b.deferred[k]; ok {
		return d
	}
	d := b.anyJITCandidate(k.pid, pcs, t)
	if b.deferred == nil {
		b.deferred = map[stackKey]bool{}
	}
	b.deferred[k] = d
	return d
}

func (b *builder) anyJITCandidate(pid uint32, pcs []uint64, t int64) bool {
	for _, pc := range pcs {
		if b.jitCandidate(pid, pc, t) {
			return true
		}
	}
	return false
}

// deferRaw sets aside an unwound RawStack: its kernel frames, then the
// user frames pcs.
func (b *builder) deferRaw(ev *format.RawStack, pcs []uint64) {
	var all []uint64
	if ev.Kernel != 0 {
		all = append(all, b.stacks[ev.Kernel]...)
	}
	all = append(all, pcs...)
	if all == nil {
		all = []uint64{}
	}
	b.pending = append(b.pending, pendingSample{pid: ev.Pid, tid: ev.Tid, t: ev.Time, weight: ev.Weight, flags: ev.Flags, pcs: all, python: ev.Python})
}

// resolvePending normalizes the samples set aside, now that every JIT
// event of the stream is known.
func (b *builder) resolvePending() {
	if len(b.pending) == 0 {
		return
	}
	b.rf.jit.finalize()
	cache := map[jitStackKey][]int{}
	for i := range b.pending {
		s := &b.pending[i]
		if s.pcs != nil || s.stack == 0 {
			locs := make([]int, len(s.pcs))
			for i, pc := range s.pcs {
				locs[i] = b.locAt(s.pid, pc, i > 0, s.t)
			}
			b.addGo(locs, s.weight, s.flags, 0, 0, s.python)
			if b.tl != nil {
				b.tl.sample(s.t, s.pid, s.tid, s.weight, s.flags, locs, s.python, s.goid)
			}
			continue
		}
		k := jitStackKey{s.pid, s.stack, s.gen, b.rf.jit.epoch(s.pid, s.t)}
		locs, ok := cache[k]
		if !ok {
			pcs := b.stacks[s.stack]
			locs = make([]int, len(pcs))
			for i, pc := range pcs {
				locs[i] = b.locAt(s.pid, pc, i > 0, s.t)
			}
			cache[k] = locs
		}
		b.addLinked(locs, s.weight, s.flags, s.goid, s.labels, s.python, s.link)
		if b.tl != nil {
			b.tl.sample(s.t, s.pid, s.tid, s.weight, s.flags, locs, s.python, s.goid)
		}
	}
	b.pending = nil
}

// locAt is loc that names JIT code: an address in no file-backed module
// that a JIT entry covers at t becomes a location in the process's
// "[jit] NAME" pseudo-module, carrying the runtime's name.
func (b *builder) locAt(pid uint32, pc uint64, caller bool, t int64) int {
	if !b.rf.HasJIT(pid) || !b.jitCandidate(pid, pc, t) {
		return b.loc(pid, pc, caller, t)
	}
	look := pc
	if caller && look > 0 {
		look--
	}
	e, ok := b.rf.JITCode(pid, look, t)
	if !ok {
		return b.loc(pid, pc, caller, t)
	}
	k := locKey{abs: pc, caller: caller, jit: e.Entry}
	if i, ok := b.locs[k]; ok {
		return i
	}
	m := b.jitModule(pid)
	i := len(b.p.Locations)
	b.p.Locations = append(b.p.Locations, &Location{Module: m, Abs: pc, Addr: pc - e.Start, Caller: caller, Frames: []Frame{e.Frame}})
	b.locs[k] = i
	return i
}

// jitModule returns pid's pseudo-module, "[jit] " and the process name.
func (b *builder) jitModule(pid uint32) *Module {
	p := b.rf.jit.byPid[pid]
	if p.module != nil {
		return p.module
	}
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for _, e := range p.entries {
		lo, hi = min(lo, e.start), max(hi, e.end)
	}
	name := b.procNames[pid]
	if name == "" {
		name = "pid " + itoa(uint64(pid))
	}
	b.jitModules++
	p.module = &Module{ModuleLoad: format.ModuleLoad{Pid: pid, ID: math.MaxUint64 - b.jitModules, Base: lo, Size: hi - lo, Kind: format.ModuleJIT, Path: "[jit] " + name}, Unload: math.MaxInt64, jit: true}
	b.jitMods = append(b.jitMods, p.module)
	return p.module
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
