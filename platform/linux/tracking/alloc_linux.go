//go:build linux

package tracking

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/rawstack/rawstack/format"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/allocshim"
	"github.com/rawstack/rawstack/platform/linux/procfs"
)

// Allocations (Config.Alloc), as both back ends record them. The
// allocation sampler (package allocshim) runs in the target: preloaded
// into a launched command, or injected into a running process. It
// writes each sampled allocation (its registers and stack, then its
// block) and each free of a sampled block into a ring it shares with
// the recorder, as sample records (samplerec.go); the eBPF back end's
// programs write the same records from uprobes where the ring cannot
// serve. The Tracker pairs a sampled call's stack with its block,
// unbiases its size and reports both to the platform.AllocHandler.

// maxAllocPending bounds the threads inside a sampled allocator call
// whose stacks wait for their block.
const maxAllocPending = 1 << 16

const (
	// allocRingBytes holds about 70 ms of the alloc benchmark's busiest
	// loop (45,000 sampled allocations a second, each a record of about
	// 1.2 KiB and its block's, and their frees), read every
	// allocReadInterval. Its pages are made at once (they count in the
	// recorder's RSS), so that the target's first samples do not fault.
	allocRingBytes    = 4 << 20
	allocReadInterval = 20 * time.Millisecond
	// allocBusyInterval is how often the ring is read while it holds
	// an eighth of its size at a read: a program whose threads outpace
	// the recorder fills it in tens of milliseconds, and its writers
	// then trap into the markers (eBPF) or wait for room (perf).
	allocBusyInterval = 2 * time.Millisecond
)

// allocState is what the Tracker keeps of Config.Alloc.
type allocState struct {
	h       platform.AllocHandler
	rate    float64
	pending map[uint32]*allocCall
	free    []*allocCall
	drops   uint64 // drops of the eBPF programs reported so far
	buf     platform.Alloc
	freeBuf format.Free // the Free reported (a literal's address would escape: one allocation a free)
	// frac carries the fractions of the allocations' counts from one
	// sample to the next (error diffusion): rounding each 1/p, between
	// 1 and 2 for large blocks, would bias the count by up to a third.
	frac float64

	// The sampler: preloaded (lib set, injected nil) or injected into
	// the running target; fallback says why it could not be, when the
	// eBPF back end's uprobes on the allocator serve instead.
	lib       string
	injected  *allocshim.Injection
	inject    bool // it was injected (injected is nil once detached)
	fallback  string
	detachErr error

	// The shared ring (nil: the markers serve); rec is its next
	// record, for merging, while recPending.
	ring       *allocshim.Ring
	ringUsed   bool // the sampler writes it
	rec        []byte
	recPending bool
	recTime    uint64
	records    uint64 // records read from it
	lostSet    uint64 // its drops reported so far: the sampler's set full
	dropped    uint64 // and no room or no stack with no markers (RingWait)
	ns         *nsPids
}

type allocCall struct {
	time uint64
	pid  uint32
	size uint64
	pcs  []uint64
}

// EnableAlloc sets the Tracker up for Config.Alloc: its handler must
// take allocations. backend names the back end in the error.
func (s *Tracker) EnableAlloc(backend string) error {
	ah, ok := s.h.(platform.AllocHandler)
	if !ok {
		return &platform.OptionError{Option: "Alloc", Backend: backend, OS: "linux", Reason: "the handler does not implement platform.AllocHandler"}
	}
	s.alloc = &allocState{h: ah, rate: float64(s.AllocRate()), pending: map[uint32]*allocCall{}}
	return nil
}

// Allocs reports whether allocations are recorded (EnableAlloc).
func (s *Tracker) Allocs() bool { return s.alloc != nil }

// AllocRate is Config.AllocRate, or its default.
func (s *Tracker) AllocRate() int {
	if s.cfg.AllocRate > 0 {
		return s.cfg.AllocRate
	}
	return platform.DefaultAllocRate
}

// AllocEnter unwinds the stack of a sampled allocator call (a
// KindAlloc record decoded into r) and holds it until the call's block
// comes (AllocReturn).
func (s *Tracker) AllocEnter(r *Record) {
	a := s.alloc
	if a == nil || !s.prepareSample(r, 0) {
		return
	}
	o := a.pending[r.Tid]
	if o == nil {
		if len(a.pending) >= maxAllocPending {
			s.ReportLost(&format.Lost{Time: int64(r.Time), Pid: r.Pid, Count: 1, Reason: format.LostUnknown})
			return
		}
		if n := len(a.free); n > 0 {
			o, a.free = a.free[n-1], a.free[:n-1]
		} else {
			o = &allocCall{}
		}
		a.pending[r.Tid] = o
	}
	sm := &s.sample
	o.time, o.pid, o.size = r.Time, r.Pid, r.Period
	o.pcs = append(o.pcs[:0], s.cutSampler(r.Pid, sm.PCs)...)
}

// cutSampler cuts the sampler's own frames from the stack of a sampled
// allocation (leaf first): those from its capture routine or marker up
// to, not including, its entry (malloc, free, operator new, ...), whose
// frame, right below the caller's, is kept as the leaf. A stack taken
// by a uprobe on the allocator itself has none.
func (s *Tracker) cutSampler(pid uint32, pcs []uint64) []uint64 {
	id := allocshim.BuildID()
	i := 0
	for i < len(pcs) {
		ml := s.ModuleAt(pid, pcs[i])
		if ml == nil || !bytes.Equal(ml.BuildID, id) {
			break
		}
		i++
	}
	if i == 0 {
		return pcs
	}
	return pcs[i-1:]
}

// AllocReturn reports the allocation whose call, by thread tid at time
// t (its stack's), returned the block at addr (0: the call failed).
func (s *Tracker) AllocReturn(tid uint32, t, addr uint64) {
	a := s.alloc
	o := a.pending[tid]
	if o == nil {
		return
	}
	delete(a.pending, tid)
	a.free = append(a.free, o)
	if o.time != t || addr == 0 {
		return // another call's return (its stack record was lost), or the call failed
	}
	bytes, objs := unbias(o.size, a.rate)
	a.frac += objs
	objects := uint64(a.frac)
	a.frac -= float64(objects)
	a.buf = platform.Alloc{Time: int64(t), Pid: o.pid, Tid: tid, Addr: addr, Size: o.size, Bytes: bytes, Objects: objects, PCs: o.pcs}
	a.h.Alloc(&a.buf)
}

// unbias returns the bytes and allocations a sampled allocation of size
// bytes stands for: it was sampled with probability
// p = 1 - exp(-size/rate), so size/p and 1/p.
func unbias(size uint64, rate float64) (bytes uint64, objects float64) {
	if size == 0 {
		return 0, 1
	}
	p := -math.Expm1(-float64(size) / rate)
	return uint64(math.Round(float64(size) / p)), 1 / p
}

// AllocFree reports the free of the sampled block at addr by thread tid
// of process pid at time t.
func (s *Tracker) AllocFree(pid, tid uint32, t, addr uint64) {
	a := s.alloc
	a.freeBuf = format.Free{Time: int64(t), Pid: pid, Tid: tid, Addr: addr}
	a.h.Free(&a.freeBuf)
}

// ReportAllocDrops reports the sampled allocations the eBPF programs
// dropped, n in all so far.
func (s *Tracker) ReportAllocDrops(n uint64) {
	if a := s.alloc; a != nil {
		s.reportNewLost(n, &a.drops, format.LostUnknown)
	}
}

// reportNewLost reports the drops of a running count n beyond those
// reported so far (*seen), and moves *seen up to n.
func (s *Tracker) reportNewLost(n uint64, seen *uint64, reason format.LostReason) {
	if n > *seen {
		s.ReportLost(&format.Lost{Time: sys.Monotonic(), Count: n - *seen, Reason: reason})
		*seen = n
	}
}

// SetAllocFallback says why the sampler could not be injected (the
// eBPF back end's uprobes on the allocator serve instead): the summary
// line shows it.
func (s *Tracker) SetAllocFallback(why string) { s.alloc.fallback = why }

// allocStats fills the allocation fields of st.
func (s *Tracker) allocStats(st *platform.Stats) {
	a := s.alloc
	if a == nil {
		return
	}
	st.AllocFallback = a.fallback
	switch {
	case a.inject && a.ringUsed:
		st.AllocMode = platform.AllocInjectRing
	case a.inject:
		st.AllocMode = platform.AllocInject
	case a.lib != "" && a.ringUsed:
		st.AllocMode = platform.AllocPreloadRing
	case a.lib != "":
		st.AllocMode = platform.AllocPreload
	default:
		st.AllocMode = platform.AllocUprobes
	}
}

// AllocStackBytes is how many bytes of stack the sampler copies per
// sampled allocation into the ring: StackSize, or 8 KiB. Not the
// unwinder's window of --unwind auto on a frame-pointer program (a
// few hundred bytes for the leaf): the sampler's records carry no
// frame-pointer chain, and are unwound whole from the copy.
func (uw *Unwinder) AllocStackBytes() int {
	n := defaultStackUser
	if uw.sizeSet {
		n = uw.size
	}
	return min(n, allocshim.MaxRingStack)
}

// createAllocRing creates the shared ring in dir ("": the sampler's
// directory) with flags (allocshim.RingWait). In frame-pointer mode
// (no unwinder) the sampler walks the frame pointers (allocshim.RingFP).
func (s *Tracker) createAllocRing(dir string, flags uint32) (*allocshim.Ring, error) {
	stack := 0
	if s.uw != nil {
		stack = s.uw.AllocStackBytes()
	} else {
		flags |= allocshim.RingFP
	}
	return allocshim.CreateRing(dir, allocRingBytes, stack, flags)
}

// PreloadSampler installs the sampler and preloads it into cmd (not yet
// started): first in its LD_PRELOAD, with the sampling rate in its
// environment and, with ring, a shared ring made with flags. Without
// allocshim.RingWait the ring is optional (the markers serve where it
// cannot be made); with it, the ring is the only way and its error is
// returned. It returns the sampler's file.
func (s *Tracker) PreloadSampler(cmd *exec.Cmd, ring bool, flags uint32) (string, error) {
	a := s.alloc
	lib, err := allocshim.Install("")
	if err != nil {
		return "", err
	}
	var r *allocshim.Ring
	if ring {
		r, err = s.createAllocRing("", flags)
		if err != nil && flags&allocshim.RingWait != 0 {
			return "", err
		}
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = allocshim.PreloadEnv(env, lib, s.AllocRate(), r)
	a.lib = lib
	if r != nil {
		a.ring, a.ringUsed = r, true
		s.PollInterval = allocReadInterval
	}
	return lib, nil
}

// InjectSampler injects the sampler into the running target pid
// (allocshim.Inject). before, if not nil, is called with the sampler's
// file first (the eBPF back end puts its uprobes on the markers there,
// so that none of the first samples is missed). With ring, the sampler
// gets a shared ring made with flags where the target's mount namespace
// sees it, given to the target's user. Without allocshim.RingWait the
// ring is optional, and a sampler in another pid namespace leaves it to
// the markers (whose uprobes see the pids the recorder knows); with it,
// a sampler that does not write the ring is an error, and one in
// another pid namespace writes its namespace's ids, which the Tracker
// translates.
func (s *Tracker) InjectSampler(pid int, ring bool, flags uint32, before func(lib string) error) error {
	a := s.alloc
	wait := flags&allocshim.RingWait != 0
	dir, err := allocshim.DirFor(pid)
	if err != nil {
		return &allocshim.InjectError{Pid: pid, Reason: "placing the sampler", Err: err}
	}
	lib, err := allocshim.Install(dir.Host)
	if err != nil {
		return &allocshim.InjectError{Pid: pid, Reason: "placing the sampler", Err: err}
	}
	if before != nil {
		if err := before(lib); err != nil {
			return err
		}
	}
	var r *allocshim.Ring
	var ns *nsPids
	if ring {
		r, err = s.createAllocRing(dir.Host, flags)
		if err == nil {
			if err = giveToOwner(r, pid); err != nil {
				r.Close()
			}
		}
		if err != nil {
			if wait {
				return &allocshim.InjectError{Pid: pid, Reason: "making the shared ring", Err: err}
			}
			r = nil
		}
	}
	if r != nil && wait {
		if theirs := allocshim.PidNamespace(pid); theirs != 0 && theirs != allocshim.PidNamespace(0) {
			if ns, err = newNSPids(pid); err != nil {
				r.Close()
				return &allocshim.InjectError{Pid: pid, Reason: "the process is in another pid namespace", Err: err}
			}
			r.SetWriterPidNS(theirs)
		}
	}
	in, err := allocshim.Inject(pid, allocshim.InjectConfig{Dir: dir, Rate: s.AllocRate(), Ring: r})
	if err != nil {
		if r != nil {
			r.Close()
		}
		return err
	}
	if wait && !in.Ringed {
		in.Detach()
		r.Close()
		return &allocshim.InjectError{Pid: pid, Reason: "the sampler could not map the shared ring " + filepath.Join(dir.Target, filepath.Base(r.Path()))}
	}
	a.injected, a.inject, a.lib = in, true, lib
	if r != nil {
		a.ring, a.ringUsed, a.ns = r, in.Ringed, ns
		s.PollInterval = allocReadInterval
	}
	return nil
}

// giveToOwner chowns the ring to the owner of process pid when that is
// not this user: a service run as its own user opens it.
func giveToOwner(r *allocshim.Ring, pid int) error {
	fi, err := os.Stat(procfs.Dir(pid))
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() {
		return nil
	}
	return r.Chown(int(st.Uid), int(st.Gid))
}

// Injected reports whether the sampler is injected and not yet
// detached.
func (s *Tracker) Injected() bool { return s.alloc != nil && s.alloc.injected != nil }

// DetachSampler ends an injected sampler at a clean detach: the ring
// says the recorder left, and rawstack_detach in the target makes the
// sampler inert and puts the slots back. The records written until
// then are read after.
func (s *Tracker) DetachSampler() {
	a := s.alloc
	if a == nil || a.injected == nil {
		return
	}
	if a.ring != nil {
		a.ring.Detach()
	}
	a.detachErr = a.injected.Detach()
	a.injected = nil
}

// closeAlloc releases the ring (once the sampler is detached).
func (s *Tracker) closeAlloc() {
	a := s.alloc
	if a == nil {
		return
	}
	s.DetachSampler()
	if a.ring != nil {
		a.ring.Close()
		a.ring = nil
	}
}

// BeginAllocRead starts a read of the shared ring, in a back end's
// ReadAll: it stamps the ring (the samplers go inert when the stamps
// stop), sets how long the session waits before its next read from how
// full the ring is now, reports what the samplers dropped and looks at
// the next record. The back end then merges the ring's records
// (AllocPending, ReportAllocRecord) with its own by time.
func (s *Tracker) BeginAllocRead() {
	a := s.alloc
	if a == nil || a.ring == nil {
		return
	}
	r := a.ring
	r.Stamp(sys.Monotonic())
	if r.Pending() >= r.Size()/8 {
		s.PollInterval = allocBusyInterval
	} else {
		s.PollInterval = allocReadInterval
	}
	_, set := r.Counts()
	s.reportNewLost(set, &a.lostSet, format.LostUnknown)
	s.reportNewLost(r.Dropped(), &a.dropped, format.LostUnknown)
	if !a.recPending {
		s.nextAllocRecord()
	}
}

// AllocPending returns the time of the ring's next record, and whether
// there is one stamped before until (later ones wait for the next read:
// the mapping a sample needs may be in a perf record written
// meanwhile).
func (s *Tracker) AllocPending(until uint64) (uint64, bool) {
	a := s.alloc
	if a == nil || !a.recPending {
		return 0, false
	}
	return a.recTime, a.recTime < until
}

// ReportAllocRecord reports the ring's pending record and looks at the
// next.
func (s *Tracker) ReportAllocRecord() {
	a := s.alloc
	s.handleAllocRecord(a.rec)
	a.ring.Advance()
	s.nextAllocRecord()
}

// nextAllocRecord reads the ring's next record into a.rec. Records too
// short to be sample records are counted lost and skipped, and a ring
// whose prefixes are broken is skipped to its end (counted once).
func (s *Tracker) nextAllocRecord() {
	a := s.alloc
	a.recPending = false
	for {
		rec, ok, err := a.ring.Next()
		if err != nil {
			s.ReportLost(&format.Lost{Time: sys.Monotonic(), Count: 1, Reason: format.LostUnknown})
			return
		}
		if !ok {
			return
		}
		if len(rec) < SampleHdrSize {
			s.ReportLost(&format.Lost{Time: sys.Monotonic(), Count: 1, Reason: format.LostUnknown})
			a.ring.Advance()
			continue
		}
		a.recPending, a.rec, a.recTime = true, rec, binary.LittleEndian.Uint64(rec[16:])
		return
	}
}

// handleAllocRecord reports one record of the ring: an allocation's
// stack, its block, or a free, of a process the Tracker follows (the
// target or one of its children). Anything else is counted lost: the
// ring is written by the target, and what it writes is not trusted.
func (s *Tracker) handleAllocRecord(rec []byte) {
	a := s.alloc
	a.records++
	s.AddBytes(uint64(len(rec)))
	le := binary.LittleEndian
	kind, pid, tid := le.Uint32(rec), le.Uint32(rec[4:]), le.Uint32(rec[8:])
	t, w := le.Uint64(rec[16:]), le.Uint64(rec[24:])
	ok := true
	if a.ns != nil {
		pid, tid, ok = a.ns.host(s, pid, tid)
	}
	if ok && (s.procs[pid] == nil || pid == 0) {
		ok = false
	}
	switch {
	case !ok:
	case kind == KindAlloc && len(rec) > SampleHdrSize:
		r := &s.rec
		if _, err := DecodeSampleRecord(rec, r); err != nil {
			break
		}
		s.records.Add(1)
		// The sampler writes user frames only (a frame-pointer walk)
		// or none (a stack copy), and reads no Python frames.
		r.Pid, r.Tid = pid, tid
		r.PCs, r.Kernel, r.UserAt = r.PCs[r.UserAt:], false, 0
		r.Py, r.PyRead = r.Py[:0], false
		s.AllocEnter(r)
		return
	case kind == KindAllocRet && len(rec) == SampleHdrSize:
		s.AllocReturn(tid, t, w)
		return
	case kind == KindFree && len(rec) == SampleHdrSize:
		s.AllocFree(pid, tid, t, w)
		return
	}
	s.ReportLost(&format.Lost{Time: sys.Monotonic(), Count: 1, Reason: format.LostUnknown})
}

// AllocRingRecords returns how many records the Tracker has read from
// the sampler's shared ring.
func (s *Tracker) AllocRingRecords() uint64 {
	if s.alloc == nil {
		return 0
	}
	return s.alloc.records
}

// nsPids translates the process and thread ids that a sampler in
// another pid namespace than the recorder's writes into the ring (its
// namespace's, as getpid and gettid give them there) into the
// recorder's. They are looked up in the NSpid lines of the target's and
// its children's threads (/proc/PID/task/TID/status) when an id is not
// known yet, and forgotten when the thread exits.
type nsPids struct {
	level  int               // the namespace's place in NSpid lines
	tids   map[uint32]uint32 // namespace id → host id (a process's is its leader's)
	back   map[uint32]uint32 // host id → namespace id
	lookAt int64             // when the threads were last read (Monotonic)
}

// maxNSIds bounds the ids nsPids keeps; nsLookInterval is how often at
// most it reads the threads again for an id it does not know (a thread
// that exited before its records were read, or a writer that lies).
const (
	maxNSIds       = 1 << 16
	nsLookInterval = int64(10 * time.Millisecond)
)

func newNSPids(pid int) (*nsPids, error) {
	ids := procfs.NSpids(procfs.Dir(pid))
	if len(ids) < 2 {
		return nil, errors.New("its ids there cannot be read (no NSpid in /proc/PID/status)")
	}
	return &nsPids{level: len(ids) - 1, tids: map[uint32]uint32{}, back: map[uint32]uint32{}}, nil
}

// host returns the recorder's ids of namespace process pid and thread
// tid.
func (n *nsPids) host(s *Tracker, pid, tid uint32) (hpid, htid uint32, ok bool) {
	hpid, ok1 := n.tids[pid]
	htid, ok2 := n.tids[tid]
	if ok1 && ok2 {
		return hpid, htid, true
	}
	if now := sys.Monotonic(); now-n.lookAt >= nsLookInterval {
		n.lookAt = now
		n.look(s)
		hpid, ok1 = n.tids[pid]
		htid, ok2 = n.tids[tid]
	}
	return hpid, htid, ok1 && ok2
}

// look reads the namespace ids of the threads of every process the
// Tracker follows that it does not know yet.
func (n *nsPids) look(s *Tracker) {
	for pid := range s.procs {
		tids, err := procfs.Tasks(int(pid))
		if err != nil {
			continue
		}
		for _, t := range tids {
			if _, ok := n.back[uint32(t)]; ok {
				continue
			}
			ids := procfs.NSpids(fmt.Sprintf("%s/task/%d", procfs.Dir(int(pid)), t))
			if len(ids) != n.level+1 || len(n.tids) >= maxNSIds {
				continue // in a namespace below the target's, or too many
			}
			n.tids[ids[n.level]] = uint32(t)
			n.back[uint32(t)] = ids[n.level]
		}
	}
}

// exit forgets host thread tid.
func (n *nsPids) exit(tid uint32) {
	if id, ok := n.back[tid]; ok {
		delete(n.back, tid)
		delete(n.tids, id)
	}
}
