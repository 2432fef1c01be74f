// Package goself learns where the running Go runtime keeps what the
// in-process tracer reads in its own goroutines and threads (the g's id,
// start function, pprof labels and scheduling state, the m's current g
// and thread id) without DWARF: a release binary is built
// `-ldflags="-s -w"` and has none, but the program can look at itself.
//
// Each offset is found by experiment, once, when [Self] is first called:
// the probe starts goroutines whose values it knows (the id runtime.Stack
// prints, the function it started them with, the labels it set with
// runtime/pprof, the thread the kernel says it runs on) and finds the one
// word of their g (or m) that holds each value, on two goroutines, so a
// word that matches by chance does not pass. A field the probe does not
// find is reported as 0 (ok false), never guessed. The offsets the
// toolchain itself fixes (g.stack at 0, g.m at 6 words, m.g0 at 0) are
// checked, not assumed.
//
// Readers of a g found in a sample (R14 on amd64, X28 on arm64) use the
// same offsets: package platform/linux/goruntime for the calling
// process, and the tracer's goroutine links.
package goself

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"unsafe"
)

// Layout is where the running runtime keeps the fields the tracer reads:
// byte offsets in runtime.g (G*) and runtime.m (M*). An offset that was
// not found is 0 and its ok flag false.
type Layout struct {
	GStackLo, GStackHi uintptr // g.stack.lo, g.stack.hi
	GM                 uintptr // g.m
	GGoid              uintptr // g.goid
	GParentGoid        uintptr // g.parentGoid (Go 1.21 on)
	GStartPC           uintptr // g.startpc: the function the goroutine started with
	GLabels            uintptr // g.labels: runtime/pprof's labels
	// GSched is g.sched, a gobuf whose first words are sp, pc and g.
	GSched uintptr
	MG0    uintptr // m.g0, the scheduler's g
	MCurg  uintptr // m.curg, the user goroutine the thread runs
	// MProcid is m.procid, the thread id the kernel knows (Linux).
	MProcid uintptr

	HasParentGoid, HasStartPC, HasLabels, HasSched, HasCurg, HasProcid bool
	// LabelList says g.labels points at a struct whose first field is
	// the labels as a []struct{Key, Value string}, sorted by key
	// (runtime/pprof's labelMap since Go 1.24, which the runtime itself
	// reads as an internal/runtime/pprof/label.Set).
	LabelList bool
}

// Scan limits: every field probed lies in the first gScan bytes of a g
// (456 bytes in Go 1.26, and larger than gScan since Go 1.17) and the
// first mScan bytes of an m (1824 bytes). A probe stops at the last
// field it finds, so it never reads past the object.
const (
	gScan = 448
	mScan = 512
)

var (
	once   sync.Once
	layout *Layout
	err    error
)

// Self returns the running runtime's layout, probing it the first time
// (about 100 µs: a few goroutines started and parked). The error says
// what could not be found at all (the g's id, which every reader needs);
// fields found alone are flagged in the Layout.
func Self() (*Layout, error) {
	once.Do(func() { layout, err = probe() })
	return layout, err
}

// Goid returns the id of the goroutine whose g is at g, read at the
// offset l gives. g must be a g: one G returned.
//
//go:nocheckptr
func (l *Layout) Goid(g uintptr) uint64 { return Word(g + l.GGoid) }

// Word reads the 8 bytes at addr, which must be readable (a field of a
// g or an m the runtime handed out: it never frees them).
//
//go:nocheckptr
//go:norace
func Word(addr uintptr) uint64 { return *(*uint64)(unsafe.Add(nil, addr)) }

// ErrNoGoid is returned by Self when the g's id was not found.
var ErrNoGoid = errors.New("goself: the goroutine id was not found in runtime.g")

func probe() (*Layout, error) {
	if unsafe.Sizeof(uintptr(0)) != 8 || G() == 0 {
		return nil, errors.New("goself: the g is read on 64-bit amd64 and arm64 only")
	}
	probeArg, probeReady = make(chan *probed, 1), make(chan chan struct{}, 1)
	l := &Layout{GStackLo: 0, GStackHi: 8, GM: 48, MG0: 0}
	// Two goroutines, started by two others, so that each value differs
	// between them.
	var a, b *probed
	started := make(chan struct{})
	go func() { a = probeGoroutine(); close(started) }()
	<-started
	b = probeGoroutine()
	defer a.release()
	defer b.release()
	// The toolchain's fixed offsets: the stack holds a local of the
	// probe, the m's g0 is another g that belongs to the same m (checked
	// while the probe ran: a parked g has no m).
	for _, p := range []*probed{a, b} {
		if !p.stackOK {
			return nil, errors.New("goself: runtime.g does not start with its stack bounds")
		}
		if !p.mOK {
			return nil, errors.New("goself: runtime.g has no m at offset 48, or runtime.m no g0 at 0")
		}
	}
	var ok bool
	if l.GGoid, ok = common(gScan, a.g, b.g, a.goid, b.goid, 0); !ok {
		return nil, ErrNoGoid
	}
	l.GParentGoid, l.HasParentGoid = common(gScan, a.g, b.g, a.parent, b.parent, l.GGoid)
	l.GStartPC, l.HasStartPC = common(gScan, a.g, b.g, uint64(a.start), uint64(b.start), 0)
	if la, lb := uint64(uintptr(a.labels)), uint64(uintptr(b.labels)); la != 0 && lb != 0 {
		l.GLabels, l.HasLabels = common(gScan, a.g, b.g, la, lb, 0)
	}
	// A parked g's gobuf holds the g itself at its third word; its sp
	// lies on the g's stack and its pc in the runtime (gopark's caller
	// saved it).
	if off, ok := common(gScan, a.g, b.g, uint64(a.g), uint64(b.g), 0); ok && off >= 16 {
		s := off - 16
		good := true
		for _, p := range []*probed{a, b} {
			sp, pc := Word(p.g+s), Word(p.g+s+8)
			f := runtime.FuncForPC(uintptr(pc))
			good = good && Word(p.g+l.GStackLo) <= sp && sp < Word(p.g+l.GStackHi) && f != nil && len(f.Name()) > 8 && f.Name()[:8] == "runtime."
		}
		l.GSched, l.HasSched = s, good
	}
	// The m of a running goroutine holds it as curg, and its thread id
	// as procid: the probes scanned their m for both while running.
	// On amd64, m.tls[0] holds the running g as well (the thread's g
	// slot): m.curg is declared after tls, so it is the last of the two.
	if both := all(a.curg, b.curg); len(both) == 1 || len(both) == 2 && runtime.GOARCH == "amd64" {
		l.MCurg, l.HasCurg = both[len(both)-1], true
	}
	l.MProcid, l.HasProcid = one(a.procid, b.procid)
	l.LabelList = a.labelList && b.labelList
	return l, nil
}

// common returns the one offset below limit, other than not, at which
// the words of both x and y hold their wanted value (va, vb); ok false if
// there is none or more than one.
func common(limit, x, y uintptr, va, vb uint64, not uintptr) (uintptr, bool) {
	return one(matches(limit, x, va, not), matches(limit, y, vb, not))
}

// matches returns the offsets below limit, other than not, at which the
// word of x is v.
func matches(limit, x uintptr, v uint64, not uintptr) []uintptr {
	if v == 0 {
		return nil
	}
	var offs []uintptr
	for off := uintptr(0); off < limit; off += 8 {
		if off != not && Word(x+off) == v {
			offs = append(offs, off)
		}
	}
	return offs
}

// one returns the one offset found in both lists.
func one(xs, ys []uintptr) (uintptr, bool) {
	if both := all(xs, ys); len(both) == 1 {
		return both[0], true
	}
	return 0, false
}

// all returns the offsets found in both lists, ascending.
func all(xs, ys []uintptr) []uintptr {
	var both []uintptr
	for _, x := range xs {
		for _, y := range ys {
			if x == y {
				both = append(both, x)
			}
		}
	}
	return both
}

// probed is what a probe goroutine knows of itself.
type probed struct {
	g         uintptr
	goid      uint64
	parent    uint64
	start     uintptr
	labels    unsafe.Pointer
	labelList bool
	// offsets in the m that held the g (curg) and the thread id
	// (procid) while the goroutine ran
	curg, procid []uintptr
	mOK          bool // g.m and m.g0 where the toolchain puts them
	stackOK      bool // g.stack holds the goroutine's locals
	done         chan struct{}
}

func (p *probed) release() { close(p.done) }

// The probe goroutine's arguments (probeMain takes none, so that its
// g's startpc is its own entry), made by the first probe.
var (
	probeArg   chan *probed
	probeReady chan chan struct{}
)

// probeGoroutine starts a goroutine with probeMain, lets it describe
// itself, and leaves it parked until release.
func probeGoroutine() *probed {
	p := &probed{done: make(chan struct{}), parent: stackGoid()}
	ready := make(chan struct{})
	probeArg <- p
	probeReady <- ready
	go probeMain()
	<-ready
	p.start = reflect.ValueOf(probeMain).Pointer()
	return p
}

// probeMain runs in a goroutine started with no arguments, so that the
// runtime's startpc is this function's entry.
func probeMain() {
	g := G()
	// First, before a call could grow the stack (morestack leaves the g
	// in m.morebuf too): the m holds the running g as curg. Scanned
	// unlocked (a locked m holds it as lockedg too), and again if the
	// goroutine moved meanwhile.
	var curg []uintptr
	for try := 0; try < 3; try++ {
		m := uintptr(Word(g + 48))
		offs := matches(mScan, m, uint64(g), 0)
		if uintptr(Word(g+48)) == m {
			curg = offs
			break
		}
	}
	p, ready := <-probeArg, <-probeReady
	p.g, p.curg = g, curg
	p.goid = stackGoid()
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("goself", strconv.FormatUint(p.goid, 10))))
	p.labels = getProfLabel()
	if p.labels != nil {
		ls := (*struct{ list []struct{ k, v string } })(p.labels).list
		p.labelList = len(ls) == 1 && ls[0].k == "goself" && ls[0].v == strconv.FormatUint(p.goid, 10)
	}
	if m := uintptr(Word(p.g + 48)); m != 0 && m%8 == 0 {
		g0 := uintptr(Word(m))
		p.mOK = g0 != 0 && g0 != p.g && uintptr(Word(g0+48)) == m
	}
	// Locked, the thread is the m's.
	runtime.LockOSThread()
	if tid := threadID(); tid != 0 {
		p.procid = matches(mScan, uintptr(Word(p.g+48)), tid, 0)
	}
	runtime.UnlockOSThread()
	// Last, as the stack may have moved while it grew.
	var local int
	at := uint64(uintptr(unsafe.Pointer(&local)))
	p.stackOK = Word(p.g) <= at && at < Word(p.g+8)
	runtime.KeepAlive(&local)
	close(ready)
	<-p.done
}

// stackGoid returns the calling goroutine's id as runtime.Stack prints
// it ("goroutine 18 [running]:").
func stackGoid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const pre = "goroutine "
	if len(b) < len(pre) || string(b[:len(pre)]) != pre {
		return 0
	}
	b = b[len(pre):]
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	id, _ := strconv.ParseUint(string(b[:n]), 10, 64)
	return id
}

// The runtime's accessors of the calling goroutine's pprof labels, which
// runtime/pprof itself links to (go.dev/issue/67401 keeps them).
//
//go:linkname getProfLabel runtime/pprof.runtime_getProfLabel
func getProfLabel() unsafe.Pointer

//go:linkname setProfLabel runtime/pprof.runtime_setProfLabel
func setProfLabel(p unsafe.Pointer)

// Labels returns the calling goroutine's pprof labels pointer (g.labels).
func Labels() unsafe.Pointer { return getProfLabel() }

// SetLabels sets the calling goroutine's pprof labels pointer, which
// goroutines it starts from now on inherit. p must point at a value
// laid out as Layout.LabelList says, or be nil.
func SetLabels(p unsafe.Pointer) { setProfLabel(p) }
