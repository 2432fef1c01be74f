//go:build linux

package tracking

import (
	"bytes"
	"debug/elf"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"unsafe"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/procfs"
)

// perf_event_attr bits for DWARF-mode sampling (include/uapi/linux/perf_event.h).
const (
	perfSampleRegsUser  = 1 << 12
	perfSampleStackUser = 1 << 13

	defaultStackUser = 8192
	maxStackUser     = 65000 // a record's size is a u16; leave room for the rest
)

// maxUnwindLag is how old a sample may be when the reader gets to it before
// it is dropped (and counted as lost, LostUnwind) instead of unwound: a
// reader that falls this far behind must catch up, not fall further.
const maxUnwindLag = 2e9 // ns

// maxBuildLag is, when sampling a whole host, how late a sample may be
// for its walk to build the unwind tables of modules it passes through for
// the first time; a later one is unwound with the tables already built
// (frame pointers elsewhere), so that a reader behind on a busy host
// catches up instead of building tables it has no time for (the next
// timely sample builds them). A single target's samples always build them.
const maxBuildLag = 5e8 // ns

// maxUnwindPasses bounds the re-walks of one sample while it discovers
// modules whose tables are not loaded yet.
const maxUnwindPasses = 8

// Unwinder turns DWARF-mode samples (registers and a copy of the user
// stack) into user frames on the host, in the goroutine that drains the
// rings. A module's unwind table is built from its file the first time a
// walk passes through it, and cached per file.
type Unwinder struct {
	arch    arch.Arch
	mask    uint64 // sample_regs_user
	size    int    // sample_stack_user
	keepRaw bool
	auto    bool
	lazyLag int64 // samples later than this build no tables
	sizeSet bool  // the user chose StackSize
	leaf    bool  // auto mode on a frame-pointer program: kernel chain + repairLeaf

	exePath string      // auto mode: the executable whose table chooseAuto built
	exeFile *unwindFile // and that table, for openFile

	procs   map[uint32]*unwindProc
	files   map[string]*unwindFile
	sweepAt int         // len(files) at which sweep runs next
	vdso    *unwindFile // read from this process on first use

	// u walks every process's stacks: its rule cache (24 KiB) is reset
	// when a sample of another process than the last one's comes, instead
	// of one walker per process (a host that starts fifty processes a
	// second sampled each of them with a fresh one).
	u       arch.Unwinder
	last    *unwindProc
	lastPid uint32

	regs arch.Regs
	mem  arch.StackCopy
	pcs  []uint64
	raw  []uint64
}

// unwindProc is one process's view: the modules the unwinder knows, and
// those whose tables are not loaded yet.
type unwindProc struct {
	n      int    // len of the procState's modules when built
	sum    uint64 // sum of their ids: ids only grow, so (n, sum) changes with any load or unload
	mods   arch.Modules
	isCode func(addr uint64) bool // the walker's Code; nil when no mapping is known
	lazy   []lazyModule           // sorted by start
	// code is every executable mapping, tables or not (the unwinder's
	// Code: a walk ends at a caller in none of them).
	code arch.Modules
	// leafRules caches repairLeaf's rule lookups by pc (a hot loop is
	// sampled at a few pcs); cleared when mods changes.
	leafRules [64]leafRule
}

type leafRule struct {
	pc   uint64 // pc+1: the zero entry is empty
	rule arch.Rule
}

// rule returns the unwind rule at pc, through leafRules.
func (p *unwindProc) rule(pc uint64) arch.Rule {
	e := &p.leafRules[(pc*0x9e3779b97f4a7c15)>>58]
	if e.pc != pc+1 {
		e.pc, e.rule = pc+1, p.mods.Rule(pc)
	}
	return e.rule
}

type lazyModule struct {
	start, end, off uint64
	path, key       string
}

// unwindFile is a module file's unwind table, built once.
type unwindFile struct {
	f     *elf.File // headers only; the file is closed
	table *arch.Table
	fp    bool // auto mode: the module keeps frame pointers
	// mem is the file mapped read-only, which table's sections are
	// slices of (arch.NewLazyTableELFMapped): only the pages lookups
	// touch are resident, where a copy of every sampled binary's
	// .eh_frame held hundreds of MiB on a busy host. release unmaps it.
	mem []byte
}

// release unmaps f's file; f's table must not be used after.
func (f *unwindFile) release() {
	if f.mem != nil {
		sys.Munmap(f.mem)
		f.mem = nil
	}
}

// maxMappedFile is the largest module file that openFile maps; larger
// ones have their sections read.
const maxMappedFile = 4 << 30

// newUnwinder returns nil for frame-pointer mode.
func newUnwinder(cfg platform.Config) *Unwinder {
	if cfg.Unwind == platform.UnwindFP {
		return nil
	}
	a := arch.AMD64
	if runtime.GOARCH == "arm64" {
		a = arch.ARM64
	}
	size := cfg.StackSize
	if size <= 0 {
		size = defaultStackUser
	}
	if size > maxStackUser {
		size = maxStackUser
	}
	size &^= 7
	return &Unwinder{
		arch: a, mask: arch.PerfRegsMask(a), size: size, keepRaw: cfg.KeepRaw, auto: cfg.Unwind == platform.UnwindAuto,
		sizeSet: cfg.StackSize > 0, lazyLag: maxUnwindLag,
		procs: map[uint32]*unwindProc{}, files: map[string]*unwindFile{}, sweepAt: minSweep,
		pcs: make([]uint64, 0, 256),
	}
}

// SetAttr asks the kernel for user registers and stack besides the
// callchain. The callchain's user part, the kernel's frame-pointer walk,
// continues a walk of the stack copy where it needs memory the copy does
// not hold (arch.Unwinder.Chain): a Go program's goroutine stack when the
// sample is taken on the thread's g0 stack (runtime.systemstack, cgo
// calls), a stack deeper than the copy. It costs the kernel a walk of the
// frame records per sample and the record 8 bytes a frame.
func (uw *Unwinder) SetAttr(attr *sys.PerfEventAttr) {
	attr.Sample_type |= perfSampleRegsUser | perfSampleStackUser
	attr.Sample_regs_user = uw.mask
	attr.Sample_stack_user = uint32(uw.size)
}

func (uw *Unwinder) nRegs() int { return bits.OnesCount64(uw.mask) }

// sample completes sm from a DWARF-mode record: the kernel frames of the
// callchain, then the user frames unwound here, or (keepRaw) the raw
// registers and stack. It returns false when the sample was dropped.
//
// Unwind tables read mapped files: a file truncated under its mapping
// (a library copied over in place) faults on access. The walk runs with
// debug.SetPanicOnFault, and such a fault drops the sample and the file's
// table instead of the recorder.
func (uw *Unwinder) sample(s *Tracker, r *record, sm *platform.Sample) (ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if e := recover(); e != nil {
			ok = uw.fault(s, sm, e)
		}
	}()
	return uw.walk(s, r, sm)
}

// fault handles a panic e of a walk: a fault in a mapped file drops that
// file's table (its modules are walked by frame pointers from then on)
// and the sample. Any other panic goes on.
func (uw *Unwinder) fault(s *Tracker, sm *platform.Sample, e any) bool {
	re, ok := e.(interface{ Addr() uintptr })
	if !ok {
		panic(e)
	}
	addr := re.Addr()
	for key, f := range uw.files {
		if len(f.mem) == 0 {
			continue
		}
		base := uintptr(unsafe.Pointer(unsafe.SliceData(f.mem)))
		if addr < base || addr-base >= uintptr(len(f.mem)) {
			continue
		}
		// Every process's view may hold the table: rebuild them all.
		uw.files[key] = &unwindFile{}
		clear(uw.procs)
		uw.last, uw.u = nil, arch.Unwinder{}
		f.release()
		return uw.drop(s, sm)
	}
	panic(e)
}

// walk is sample's work.
func (uw *Unwinder) walk(s *Tracker, r *record, sm *platform.Sample) bool {
	sm.RegMask, sm.Regs, sm.StackAddr, sm.Stack, sm.Chain = 0, nil, 0, nil, nil
	if uw.leaf && r.UserAt < len(sm.PCs) {
		// The kernel walked the frame pointers: repair the leaf. A
		// record with no user frames (the allocation sampler's: its
		// registers and stack only) is walked whole below.
		return uw.repairLeaf(s, r, sm)
	}
	at := min(max(r.UserAt, 0), len(sm.PCs))
	kernel, chain := sm.PCs[:at], sm.PCs[at:]
	if !r.Kernel {
		kernel = sm.PCs[:0]
	}
	if r.UserABI == 0 || len(r.UserRegs) == 0 || uw.regs.SetPerf(uw.arch, uw.mask, r.UserRegs) != nil {
		// A kernel thread (no user registers): the kernel frames, if any.
		sm.PCs = kernel
		if len(kernel) == 0 {
			return uw.drop(s, sm)
		}
		return true
	}
	uw.mem = arch.StackCopy{Addr: uw.regs.SP(), Data: r.UserStack}
	if uw.keepRaw {
		uw.raw, sm.RegMask = uw.regs.AppendMasked(uw.raw[:0])
		sm.Regs, sm.StackAddr, sm.Stack = uw.raw, uw.mem.Addr, uw.mem.Data
		if sm.Stack == nil {
			sm.Stack = []byte{}
		}
		sm.PCs, sm.Chain = kernel, chain
		return true
	}
	lag := sys.Monotonic() - sm.Time
	if lag > maxUnwindLag {
		return uw.drop(s, sm)
	}
	p := uw.proc(s, sm.Pid)
	if uw.last != p {
		uw.u = arch.Unwinder{Modules: &p.mods, Code: p.isCode}
		uw.last, uw.lastPid = p, sm.Pid
	}
	pcs := append(uw.pcs[:0], kernel...)
	nk := len(pcs)
	uw.u.Chain = chain
	for pass := 0; ; pass++ {
		pcs = uw.u.Unwind(&uw.regs, &uw.mem, pcs[:nk])
		if pass+1 >= maxUnwindPasses || len(p.lazy) == 0 || lag > uw.lazyLag || !uw.loadFor(s, p, sm.Pid, pcs[nk:]) {
			break
		}
	}
	uw.u.Chain = nil
	if uw.u.Stop != arch.StopOutermost && uw.u.Stop != arch.StopChain {
		// Cut short: the stack copy ended (a bigger StackSize helps), the
		// frame limit, or no rule and no frame pointer.
		sm.Flags |= format.SampleTruncated
	}
	uw.pcs = pcs
	sm.PCs = pcs
	return true
}

// drop counts sm as lost (LostUnwind) and returns false.
func (uw *Unwinder) drop(s *Tracker, sm *platform.Sample) bool {
	s.lost.Add(1)
	s.h.Lost(&format.Lost{Time: sm.Time, Pid: sm.Pid, Count: 1, Reason: format.LostUnwind})
	return false
}

// proc returns pid's unwind state, rebuilt when its modules changed.
func (uw *Unwinder) proc(s *Tracker, pid uint32) *unwindProc {
	ps := s.procs[pid]
	var n int
	var sum uint64
	if ps != nil {
		n = len(ps.modules)
		for _, m := range ps.modules {
			sum += m.id
		}
	}
	p := uw.procs[pid]
	if p != nil && p.n == n && p.sum == sum {
		return p
	}
	if len(uw.procs) > 2*len(s.procs)+16 {
		for id := range uw.procs {
			if s.procs[id] == nil {
				delete(uw.procs, id)
			}
		}
	}
	p = &unwindProc{n: n, sum: sum}
	if ps != nil {
		for _, m := range ps.modules {
			p.code.Add(arch.Module{Start: m.start, End: m.end})
			ml := m.ml
			if ml != nil && ml.Kind == format.ModuleVDSO {
				uw.add(p, uw.vdsoFile(), m.start, m.end, 0)
				continue
			}
			if ml == nil || (ml.Kind != format.ModuleELF && ml.Kind != format.ModuleUnknown) || !strings.HasPrefix(ml.Path, "/") {
				continue
			}
			key := unwindKey(ml)
			if f, ok := uw.files[key]; ok {
				uw.add(p, f, m.start, m.end, ml.FileOffset)
				continue
			}
			p.lazy = append(p.lazy, lazyModule{start: m.start, end: m.end, off: ml.FileOffset, path: ml.Path, key: key})
		}
	}
	sort.Slice(p.lazy, func(i, j int) bool { return p.lazy[i].start < p.lazy[j].start })
	if p.code.Len() > 0 { // no mappings known: no way to tell code
		p.isCode = func(addr uint64) bool { return p.code.Find(addr) != nil }
	}
	uw.procs[pid] = p
	return p
}

// add enters a module whose file is loaded (or failed to load) into p.
func (uw *Unwinder) add(p *unwindProc, f *unwindFile, start, end, off uint64) {
	if f.f == nil {
		return // unreadable: frame pointers there
	}
	bias, err := arch.LoadBias(f.f, start, off)
	if err != nil {
		return
	}
	m := arch.Module{Start: start, End: end, Bias: bias, Table: f.table}
	if f.fp {
		m.Table = nil
	}
	p.mods.Add(m)
	p.leafRules = [len(p.leafRules)]leafRule{}
}

// loadFor loads the tables of the not yet loaded modules that pcs (a
// walk's user frames) pass through and reports whether it loaded any.
func (uw *Unwinder) loadFor(s *Tracker, p *unwindProc, pid uint32, pcs []uint64) bool {
	loaded := false
	for i, pc := range pcs {
		if i > 0 {
			pc-- // a return address: the call is before it
		}
		j := sort.Search(len(p.lazy), func(j int) bool { return p.lazy[j].end > pc })
		if j == len(p.lazy) || pc < p.lazy[j].start {
			continue
		}
		lm := p.lazy[j]
		p.lazy = append(p.lazy[:j], p.lazy[j+1:]...)
		f, ok := uw.files[lm.key]
		if !ok {
			if len(uw.files) >= uw.sweepAt {
				uw.sweep(s)
			}
			f = uw.openFile(pid, lm)
			uw.files[lm.key] = f
		}
		uw.add(p, f, lm.start, lm.end, lm.off)
		loaded = true
	}
	return loaded
}

// openFile builds the unwind table of a module's file as process pid sees
// it: through /proc/PID/root, then the path as is, then (for a file
// deleted or replaced since it was mapped) /proc/PID/map_files.
func (uw *Unwinder) openFile(pid uint32, lm lazyModule) *unwindFile {
	path := strings.TrimSuffix(lm.path, " (deleted)")
	if uw.exeFile != nil && path == uw.exePath {
		uf := uw.exeFile
		uw.exeFile = nil
		return uf
	}
	dir := procfs.Dir(int(pid))
	for _, name := range []string{dir + "/root" + path, path, fmt.Sprintf("%s/map_files/%x-%x", dir, lm.start, lm.end)} {
		if fi, err := os.Stat(name); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		osf, err := os.Open(name)
		if err != nil {
			continue
		}
		f, err := elf.NewFile(osf)
		if err != nil {
			osf.Close()
			continue
		}
		uf := &unwindFile{f: f}
		if fi, err := osf.Stat(); err == nil && fi.Size() > 0 && fi.Size() <= maxMappedFile {
			uf.mem, _ = sys.MmapRead(int(osf.Fd()), 0, int(fi.Size()))
		}
		// A walk needs a few of the module's FDEs: parse those (and,
		// for --unwind auto's test, a sample of them).
		uf.table, _ = arch.NewLazyTableELFMapped(f, path, uf.mem) // nil: frame pointers there
		osf.Close()
		if uf.table == nil {
			uf.release()
		} else if uf.mem != nil {
			// Building the table read the file's headers, its section
			// index and (a Go binary's) the pclntab's function list,
			// megabytes that stay in this process's resident set while
			// mapped though no lookup needs them again: a whole-host
			// session maps every binary it unwinds. Lookups fault back the
			// few pages they read, from the page cache.
			sys.DropPages(uf.mem)
		}
		if uw.auto && !uw.leaf && keepsFramePointers(uw.arch, uf.table) && !uf.table.Go() {
			uf.fp, uf.table = true, nil // walked by frame pointers: drop the rows
		}
		return uf
	}
	return &unwindFile{}
}

// vdsoFile returns the vDSO's unwind table. The kernel maps one vDSO
// image into every process of an ABI, so it is read once from this
// process's memory; its rules are link-time addresses like a file's.
func (uw *Unwinder) vdsoFile() *unwindFile {
	if uw.vdso != nil {
		return uw.vdso
	}
	uw.vdso = &unwindFile{}
	data, err := procfs.ReadSmall("/proc/self/maps", 64<<20)
	if err != nil {
		return uw.vdso
	}
	maps, _ := procfs.ParseMaps(data)
	for i := range maps {
		m := &maps[i]
		if m.Path != "[vdso]" || m.End-m.Start > 1<<20 {
			continue
		}
		mem, err := os.Open("/proc/self/mem")
		if err != nil {
			return uw.vdso
		}
		img := make([]byte, m.End-m.Start)
		_, err = mem.ReadAt(img, int64(m.Start))
		mem.Close()
		if err != nil {
			return uw.vdso
		}
		f, err := elf.NewFile(bytes.NewReader(img))
		if err != nil {
			return uw.vdso
		}
		uw.vdso.f = f
		uw.vdso.table, _ = arch.NewTableELF(f, "[vdso]")
		if uw.auto && !uw.leaf {
			uw.vdso.fp = keepsFramePointers(uw.arch, uw.vdso.table)
		}
		break
	}
	return uw.vdso
}

// minSweep is the number of cached module files below which sweep does
// not run.
const minSweep = 64

// sweep forgets the tables of files no process maps any more: a host that
// runs go test builds a new binary per run, and a whole-host recording
// that kept every table it built would grow without bound. It runs when
// the cache has doubled since the last sweep, so its cost (a pass over
// every process's modules) is amortized over the tables built meanwhile.
func (uw *Unwinder) sweep(s *Tracker) {
	live := make(map[string]bool, len(uw.files))
	for _, ps := range s.procs {
		for _, m := range ps.modules {
			if ml := m.ml; ml != nil {
				live[unwindKey(ml)] = true
			}
		}
	}
	dropped := false
	for k, f := range uw.files {
		if !live[k] {
			delete(uw.files, k)
			if f.mem != nil {
				dropped = true
				f.release()
			}
		}
	}
	if dropped {
		// Views of exited processes may still hold an unmapped table.
		for pid := range uw.procs {
			if s.procs[pid] == nil {
				delete(uw.procs, pid)
			}
		}
		if uw.last != nil && uw.procs[uw.lastPid] != uw.last {
			uw.last, uw.u = nil, arch.Unwinder{}
		}
	}
	uw.sweepAt = max(minSweep, 2*len(uw.files))
}

// unwindKey names a module's file in the unwinder's cache: its build id
// where it has one, so that the copies of one binary at other paths (a
// test binary copied or rebuilt identically, a library in many
// containers' roots) share one table; else its path.
func unwindKey(ml *format.ModuleLoad) string {
	if len(ml.BuildID) > 0 {
		return "id\x00" + string(ml.BuildID)
	}
	return ml.Path
}

// SetUserAttr asks, in attr, for what the unwinder and the goroutine
// reader take from each sample: the user registers and a copy of the
// user stack (DWARF and auto modes), or, in frame-pointer mode with
// goroutines or the g register (Config.SampleG), only the g register and
// the stack pointer.
func (s *Tracker) SetUserAttr(attr *sys.PerfEventAttr) {
	if s.uw != nil {
		s.uw.SetAttr(attr)
	} else if s.rec.regsOnly {
		attr.Sample_type |= perfSampleRegsUser
		attr.Sample_regs_user = s.rec.UserRegsMask
	}
}

// StackBytes is how many bytes of user stack each sample copies.
func (uw *Unwinder) StackBytes() int { return uw.size }
