//go:build linux && (amd64 || arm64)

package ebpf

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/rawstack/rawstack/format"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/allocshim"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// Records of the allocator programs (bpf/rawstack.bpf.c).
const (
	bpfKindAlloc    = 4 // a sampled call's stack, weight = bytes asked for
	bpfKindAllocRet = 5 // its return: header only, weight = the block (0: none)
	bpfKindFree     = 6 // a sampled block was freed: header only, weight = the block

	maxAllocPending = 1 << 16 // threads inside a sampled allocator call
)

// allocState pairs each sampled call's stack with its return.
type allocState struct {
	h       platform.AllocHandler
	rate    float64
	pending map[uint32]*allocCall
	free    []*allocCall
	lost    uint64 // BPF-side drops reported so far (live map or calls map full)
	buf     platform.Alloc
	freeBuf format.Free // the Free reported (a literal's address would escape: one allocation a free)
	// frac carries the fractions of the allocations' counts from one
	// sample to the next (error diffusion): rounding each 1/p, between
	// 1 and 2 for large blocks, would bias the count by up to a third.
	frac float64
}

type allocCall struct {
	time uint64
	pid  uint32
	size uint64
	pcs  []uint64
}

// allocEnter unwinds the stack of a sampled call and holds it until the
// call returns.
func (s *Session) allocEnter(r *tracking.Record) {
	a := s.bpf.alloc
	if a == nil || !s.PrepareSample(r, 0) {
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
	sm := s.SampleBuf()
	o.time, o.pid, o.size = r.Time, r.Pid, r.Period
	o.pcs = append(o.pcs[:0], s.cutSampler(r.Pid, sm.PCs)...)
}

// cutSampler cuts the sampler's own frames from the stack of a sampled
// allocation (leaf first): those from its capture routine or marker up
// to, not including, its entry (malloc, free, operator new, ...), whose
// frame, right below the caller's, is kept as the leaf. A stack taken
// by a uprobe on the allocator itself has none.
func (s *Session) cutSampler(pid uint32, pcs []uint64) []uint64 {
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

// allocReturn reports the allocation whose call returned the block in
// the header h.
func (s *Session) allocReturn(h []byte) {
	a := s.bpf.alloc
	le := binary.LittleEndian
	tid, t, addr := le.Uint32(h[8:]), le.Uint64(h[16:]), le.Uint64(h[24:])
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

// allocFree reports the free of a sampled block.
func (s *Session) allocFree(h []byte) {
	le := binary.LittleEndian
	a := s.bpf.alloc
	a.freeBuf = format.Free{Time: int64(le.Uint64(h[16:])), Pid: le.Uint32(h[4:]), Tid: le.Uint32(h[8:]), Addr: le.Uint64(h[24:])}
	a.h.Free(&a.freeBuf)
}

// reportAllocLost reports sampled allocations the programs dropped.
func (s *Session) reportAllocLost(n uint64) {
	a := s.bpf.alloc
	if a == nil || n <= a.lost {
		return
	}
	s.ReportLost(&format.Lost{Time: sys.Monotonic(), Count: n - a.lost, Reason: format.LostUnknown})
	a.lost = n
}
