package goruntime

import (
	"os"

	"debug/buildinfo"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/goself"
)

// Goroutines of sampled Go code. In Go code (ABIInternal) the current g
// is in a register: R14 on amd64, X28 on arm64. A sample's user
// registers give it; the g's goid and labels fields, read from the target
// at offsets found in the executable's DWARF, give the goroutine id and
// its pprof labels. A g whose stack bounds do not hold the sample's stack
// pointer is not the running goroutine (the sample was in C code, or on
// the scheduler's g0 or a signal stack): such samples get goroutine 0.
//
// Labels: runtime/pprof keeps a goroutine's labels in an immutable
// labelMap (Go >= 1.24: a sorted slice of key/value strings) that g.labels
// points to. Each distinct map is read once and cached by its address
// together with its slice header (an address reused by a later map
// after a collection almost never comes with the same slice), so a
// sample costs one read of the g and one of the map's header.

// Perf register numbers of the g register and the stack pointer.
const (
	perfRegAMD64SP  = 7
	perfRegAMD64R14 = 22
	perfRegARM64X28 = 28
	perfRegARM64SP  = 31
)

// goLayout is where a Go binary keeps what a sample's goroutine needs.
type goLayout struct {
	stackLo, stackHi uint64 // g.stack.lo, g.stack.hi
	goid             uint64
	labels           uint64 // g.labels; 0: not found
	span             uint64 // bytes of the g read per sample
	// labelMap → list []Label; each Label is {Key, Value string}.
	listOff   uint64
	labelSize uint64
	keyOff    uint64
	valueOff  uint64
	hasLabels bool
}

// errNotGo says an executable is not a Go program (no goroutines).
var errNotGo = errors.New("not a Go program")

// goLayoutOf reads the layout from the Go executable at path.
func goLayoutOf(path string) (*goLayout, error) {
	if _, err := buildinfo.ReadFile(path); err != nil {
		return nil, errNotGo
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := typesDWARF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: no DWARF (built with -ldflags=-w or stripped): %w", path, err)
	}
	want := map[string]map[string]uint64{
		"runtime.g":                          nil,
		"runtime.stack":                      nil,
		"runtime/pprof.labelMap":             nil,
		"internal/runtime/pprof/label.Set":   nil,
		"internal/runtime/pprof/label.Label": nil,
		"runtime/pprof.LabelSet":             nil,
	}
	sizes := map[string]uint64{}
	if err := goStructs(d, want, sizes); err != nil {
		return nil, fmt.Errorf("%s: DWARF: %w", path, err)
	}
	g, st := want["runtime.g"], want["runtime.stack"]
	stack, ok1 := g["stack"]
	goid, ok2 := g["goid"]
	lo, ok3 := st["lo"]
	hi, ok4 := st["hi"]
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, fmt.Errorf("%s: DWARF has no runtime.g with stack and goid", path)
	}
	l := &goLayout{stackLo: stack + lo, stackHi: stack + hi, goid: goid}
	l.span = max(l.stackHi, l.goid) + 8
	if lab, ok := g["labels"]; ok {
		l.labels = lab
		l.span = max(l.span, lab+8)
	}
	// Go >= 1.24: labelMap{label.Set{List []label.Label}}.
	lm, set, lb := want["runtime/pprof.labelMap"], want["internal/runtime/pprof/label.Set"], want["internal/runtime/pprof/label.Label"]
	if setOff, ok := lm["Set"]; ok {
		if listOff, ok := set["List"]; ok {
			k, ok1 := lb["Key"]
			v, ok2 := lb["Value"]
			if ok1 && ok2 && sizes["internal/runtime/pprof/label.Label"] > 0 {
				l.listOff, l.keyOff, l.valueOff = setOff+listOff, k, v
				l.labelSize = sizes["internal/runtime/pprof/label.Label"]
				l.hasLabels = l.labels != 0
			}
		}
	}
	return l, nil
}

// selfLayout is the calling process's layout, found by experiment
// (goself.Self): no DWARF needed.
func selfLayout() (*goLayout, error) {
	sl, err := goself.Self()
	if err != nil {
		return nil, err
	}
	l := &goLayout{stackLo: uint64(sl.GStackLo), stackHi: uint64(sl.GStackHi), goid: uint64(sl.GGoid)}
	l.span = max(l.stackHi, l.goid) + 8
	if sl.HasLabels && sl.LabelList {
		// labelMap{label.Set{List []label.Label}}, Label{Key, Value string}:
		// the probe read its own labels so.
		l.labels, l.listOff, l.labelSize, l.keyOff, l.valueOff, l.hasLabels = uint64(sl.GLabels), 0, 32, 0, 16, true
		l.span = max(l.span, l.labels+8)
	}
	return l, nil
}

// typesDWARF loads the part of f's DWARF that describes types: the
// debug info itself and what its attributes refer to, not the line,
// location and range tables (most of the rest, and what decompressing
// costs). Other layouts (.zdebug sections) load whole.
func typesDWARF(f *elf.File) (*dwarf.Data, error) {
	data := func(name string) ([]byte, error) {
		s := f.Section(name)
		if s == nil {
			return nil, nil
		}
		return s.Data()
	}
	info, err := data(".debug_info")
	if err != nil || info == nil {
		return f.DWARF()
	}
	abbrev, err := data(".debug_abbrev")
	if err != nil {
		return nil, err
	}
	str, err := data(".debug_str")
	if err != nil {
		return nil, err
	}
	d, err := dwarf.New(abbrev, nil, nil, info, nil, nil, nil, str)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{".debug_addr", ".debug_str_offsets", ".debug_line_str"} {
		b, err := data(name)
		if err != nil {
			return nil, err
		}
		if b != nil {
			if err := d.AddSection(name, b); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// goStructs fills want[name], for each struct type named in want whose
// entry is nil, with the byte offsets of its members, and sizes[name]
// with its size.
func goStructs(d *dwarf.Data, want map[string]map[string]uint64, sizes map[string]uint64) error {
	found := 0
	r := d.Reader()
	for found < len(want) {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagStructType {
			if e.Children && e.Tag != dwarf.TagCompileUnit {
				r.SkipChildren()
			}
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		m, ok := want[name]
		if !ok || m != nil || !e.Children {
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		m = map[string]uint64{}
		if sz, ok := e.Val(dwarf.AttrByteSize).(int64); ok {
			sizes[name] = uint64(sz)
		}
		for {
			c, err := r.Next()
			if err != nil || c == nil || c.Tag == 0 {
				break
			}
			if c.Tag == dwarf.TagMember {
				n, _ := c.Val(dwarf.AttrName).(string)
				if off, ok := c.Val(dwarf.AttrDataMemberLoc).(int64); ok {
					m[n] = uint64(off)
				}
			}
			if c.Children {
				r.SkipChildren()
			}
		}
		want[name] = m
		found++
	}
	return nil
}

// Caps on what one label set may hold.
const (
	maxLabels     = 64
	maxLabelBytes = 1 << 10
)

// goProc is the goroutine state of one sampled Go process.
type goProc struct {
	layout *goLayout // nil: not Go, or unreadable
	gbuf   []byte
	hdr    [24]byte
	sets   map[uint64]labelEntry // by labelMap address
}

type labelEntry struct {
	list, n uint64 // the slice header it was read with
	id      uint64
}

// goReader reads the goroutine of samples of Go processes.
type goReader struct {
	read  func(pid uint32, addr uint64, buf []byte) bool
	exe   func(pid uint32) string // the process's executable
	procs map[uint32]*goProc
	// warning names a Go program whose goroutines cannot be read (no
	// DWARF), for the session's summary; "" for none.
	warning string
	// Label sets are numbered by content across processes, from 1.
	ids  map[string]uint64
	sets [][]format.Label // by id-1
}

func newGoReader(read func(pid uint32, addr uint64, buf []byte) bool, exe func(pid uint32) string) *goReader {
	return &goReader{read: read, exe: exe, procs: map[uint32]*goProc{}, ids: map[string]uint64{}}
}

// forget drops a process's state (it exited or exec'd).
func (gr *goReader) forget(pid uint32) { delete(gr.procs, pid) }

// goroutine returns the goroutine id and label set id (0: none) of a
// sample of pid whose g register held g and stack pointer sp, and the
// labels when the set is new (nil otherwise). The process's executable
// is read the first time; a known g with known labels costs two reads
// and no allocation.
func (gr *goReader) goroutine(pid uint32, g, sp uint64) (goid, set uint64, fresh []format.Label) {
	p := gr.procs[pid]
	if p == nil {
		p = &goProc{sets: map[uint64]labelEntry{}}
		if pid == uint32(os.Getpid()) {
			// The own process learns its runtime's layout by itself,
			// DWARF or not (package internal/goself).
			p.layout, _ = selfLayout()
		} else if path := gr.exe(pid); path != "" {
			var err error
			p.layout, err = goLayoutOf(path)
			if err != nil && !errors.Is(err, errNotGo) && gr.warning == "" {
				gr.warning = fmt.Sprintf("pid %d: %v", pid, err)
			}
		}
		if p.layout != nil {
			p.gbuf = make([]byte, p.layout.span)
		}
		gr.procs[pid] = p
	}
	l := p.layout
	if l == nil || g == 0 || g&7 != 0 || !gr.read(pid, g, p.gbuf) {
		return 0, 0, nil
	}
	le := binary.LittleEndian
	lo, hi := le.Uint64(p.gbuf[l.stackLo:]), le.Uint64(p.gbuf[l.stackHi:])
	if sp < lo || sp >= hi {
		return 0, 0, nil
	}
	goid = le.Uint64(p.gbuf[l.goid:])
	if !l.hasLabels {
		return goid, 0, nil
	}
	lm := le.Uint64(p.gbuf[l.labels:])
	if lm == 0 || !gr.read(pid, lm+l.listOff, p.hdr[:]) {
		return goid, 0, nil
	}
	list, n := le.Uint64(p.hdr[:]), le.Uint64(p.hdr[8:])
	if e, ok := p.sets[lm]; ok && e.list == list && e.n == n {
		return goid, e.id, nil
	}
	id, fresh := gr.readSet(pid, l, list, n)
	if id != 0 {
		p.sets[lm] = labelEntry{list: list, n: n, id: id}
	}
	return goid, id, fresh
}

// readSet reads n labels at list and interns them by content.
func (gr *goReader) readSet(pid uint32, l *goLayout, list, n uint64) (uint64, []format.Label) {
	if n == 0 || n > maxLabels {
		return 0, nil
	}
	buf := make([]byte, n*l.labelSize)
	if !gr.read(pid, list, buf) {
		return 0, nil
	}
	le := binary.LittleEndian
	str := func(b []byte) (string, bool) {
		ptr, sz := le.Uint64(b), le.Uint64(b[8:])
		if sz == 0 {
			return "", true
		}
		if sz > maxLabelBytes {
			return "", false
		}
		s := make([]byte, sz)
		if !gr.read(pid, ptr, s) {
			return "", false
		}
		return string(s), true
	}
	labels := make([]format.Label, 0, n)
	var key strings.Builder
	for i := uint64(0); i < n; i++ {
		e := buf[i*l.labelSize:]
		k, ok1 := str(e[l.keyOff:])
		v, ok2 := str(e[l.valueOff:])
		if !ok1 || !ok2 {
			return 0, nil
		}
		labels = append(labels, format.Label{Key: k, Value: v})
		fmt.Fprintf(&key, "%d:%s%d:%s", len(k), k, len(v), v)
	}
	if id, ok := gr.ids[key.String()]; ok {
		return id, nil
	}
	gr.sets = append(gr.sets, labels)
	id := uint64(len(gr.sets))
	gr.ids[key.String()] = id
	return id, labels
}
