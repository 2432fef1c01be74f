package symbolizer

import (
	"encoding/hex"
	"fmt"
	"math"
	"sort"

	"github.com/rawstack/rawstack/format"
)

// Module is one mapping of a module in a process, from its load to its
// unload, as ModuleLoad and ModuleUnload events describe it.
type Module struct {
	format.ModuleLoad
	// Unload is the time the module was unloaded, math.MaxInt64 while it
	// stays loaded.
	Unload int64

	jit bool // a process's "[jit] NAME" pseudo-module (symbolizer/jit.go)
}

// Contains reports whether m covers addr at time t.
func (m *Module) Contains(addr uint64, t int64) bool {
	return addr >= m.Base && addr-m.Base < m.Size && m.Time <= t && t < m.Unload
}

// BuildIDHex returns the GNU build id in lower-case hex, "" if none.
func (m *Module) BuildIDHex() string { return hex.EncodeToString(m.BuildID) }

// Name returns the module's path, or a description of an unnamed module.
func (m *Module) Name() string {
	if m.Path != "" {
		return m.Path
	}
	return fmt.Sprintf("[%s %#x]", m.Kind, m.Base)
}

// ModuleDB is the time-aware database of the modules of a stream: a range
// of addresses may hold one module, be unloaded, then hold another, and
// the database answers which module covered an address at a given time.
// Modules of pid 0 (the kernel) are visible from every process.
type ModuleDB struct {
	byPid map[uint32]*pidModules
	byID  map[uint64]*Module
	all   []*Module
}

type pidModules struct {
	mods    []*Module // sorted by Base, then load order
	maxSize uint64
	gen     uint64 // bumped on every load or unload
}

// NewModuleDB returns an empty database.
func NewModuleDB() *ModuleDB {
	return &ModuleDB{byPid: map[uint32]*pidModules{}, byID: map[uint64]*Module{}}
}

// Load records a ModuleLoad event. The event is copied.
func (db *ModuleDB) Load(ev *format.ModuleLoad) *Module {
	m := &Module{ModuleLoad: *ev, Unload: math.MaxInt64}
	m.BuildID = append([]byte(nil), ev.BuildID...)
	db.byID[m.ID] = m
	db.all = append(db.all, m)
	p := db.pid(m.Pid)
	i := sort.Search(len(p.mods), func(i int) bool { return p.mods[i].Base > m.Base })
	p.mods = append(p.mods, nil)
	copy(p.mods[i+1:], p.mods[i:])
	p.mods[i] = m
	if m.Size > p.maxSize {
		p.maxSize = m.Size
	}
	p.gen++
	return m
}

// Unload records a ModuleUnload event; an unknown id is ignored.
func (db *ModuleDB) Unload(ev *format.ModuleUnload) {
	if m, ok := db.byID[ev.ID]; ok && m.Unload == math.MaxInt64 {
		m.Unload = ev.Time
		db.pid(m.Pid).gen++
	}
}

func (db *ModuleDB) pid(pid uint32) *pidModules {
	p := db.byPid[pid]
	if p == nil {
		p = &pidModules{}
		db.byPid[pid] = p
	}
	return p
}

// Forget drops every module of the processes pids (never the kernel's,
// pid 0) and returns them: a reader of a long stream that saw those
// processes end, and holds no sample of theirs left to name, calls it so
// that the database does not grow with the processes it has seen.
func (db *ModuleDB) Forget(pids []uint32) []*Module {
	drop := map[uint32]bool{}
	for _, pid := range pids {
		if pid != 0 && db.byPid[pid] != nil {
			drop[pid] = true
			delete(db.byPid, pid)
		}
	}
	if len(drop) == 0 {
		return nil
	}
	var gone []*Module
	kept := db.all[:0]
	for _, m := range db.all {
		if drop[m.Pid] {
			gone = append(gone, m)
			delete(db.byID, m.ID)
			continue
		}
		kept = append(kept, m)
	}
	clear(db.all[len(kept):])
	db.all = kept
	return gone
}

// Modules returns every module ever loaded, in load order.
func (db *ModuleDB) Modules() []*Module { return db.all }

// Generation changes whenever the modules of pid (or of the kernel)
// change; results of Lookup for pid can be cached under it.
func (db *ModuleDB) Generation(pid uint32) uint64 {
	g := uint64(0)
	if p := db.byPid[pid]; p != nil {
		g = p.gen
	}
	if k := db.byPid[0]; k != nil && pid != 0 {
		g += k.gen << 32
	}
	return g
}

// Lookup returns the module covering addr in process pid at time t: among
// the modules of pid and of pid 0 loaded at t whose range holds addr, the
// one loaded last. It returns nil when no module covers addr.
func (db *ModuleDB) Lookup(pid uint32, addr uint64, t int64) *Module {
	best := db.pid0(pid).find(addr, t)
	if pid != 0 {
		if k := db.byPid[0]; k != nil {
			if m := k.find(addr, t); m != nil && (best == nil || m.Time > best.Time) {
				best = m
			}
		}
	}
	return best
}

func (db *ModuleDB) pid0(pid uint32) *pidModules {
	if p := db.byPid[pid]; p != nil {
		return p
	}
	return &pidModules{}
}

func (p *pidModules) find(addr uint64, t int64) *Module {
	i := sort.Search(len(p.mods), func(i int) bool { return p.mods[i].Base > addr })
	var best *Module
	for j := i - 1; j >= 0; j-- {
		m := p.mods[j]
		if addr-m.Base >= p.maxSize {
			break
		}
		if m.Contains(addr, t) && (best == nil || m.Time > best.Time || m.Time == best.Time && m.ID > best.ID) {
			best = m
		}
	}
	return best
}

// Segment is a loadable segment of an ELF file: file bytes [Off,
// Off+FileSize) are mapped at link-time virtual address Vaddr.
type Segment struct {
	Off, FileSize, Vaddr uint64
}

// Relative converts an absolute address in m to the module-relative
// address format/SPEC.md defines: for ELF the link-time virtual address,
// found through segs (the file's PT_LOAD program headers); for PE the
// RVA; for the kernel the address itself. ok is false when an ELF file
// offset lies in no segment (or segs is empty): rel is then the file
// offset.
func (m *Module) Relative(abs uint64, segs []Segment) (rel uint64, ok bool) {
	switch m.Kind {
	case format.ModuleKernel:
		return abs, true
	case format.ModuleELF, format.ModuleUnknown, format.ModuleVDSO:
		f := abs - m.Base + m.FileOffset
		for _, s := range segs {
			if f >= s.Off && f-s.Off < s.FileSize {
				return f - s.Off + s.Vaddr, true
			}
		}
		return f, false
	default:
		return abs - m.Base + m.FileOffset, true
	}
}
