//go:build linux && (amd64 || arm64)

package ebpf

import (
	"encoding/binary"
	"time"

	"github.com/rawstack/rawstack/format"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform/linux/allocshim"
)

// The preloaded sampler's shared ring (allocshim.Ring): a launched
// command's sampled allocations and the frees of their blocks arrive
// there, written by the sampler itself in the BPF programs' record
// layout, with no trap into the kernel. The ring is read with the BPF
// ring buffer and the perf rings, merged by time.
const (
	// shimRingBytes holds about 70 ms of the alloc benchmark's busiest
	// loop (45,000 sampled allocations a second, each a record of about
	// 1.2 KiB and its block's, and their frees), read every
	// shimReadInterval. Its pages are made at once (they count in the
	// recorder's RSS), so that the target's first samples do not fault.
	shimRingBytes    = 4 << 20
	shimReadInterval = 20 * time.Millisecond
	// shimBusyInterval is how often the ring is read while it holds an
	// eighth of its size at a read: a program whose threads outpace the
	// recorder fills it in tens of milliseconds, and records that find
	// it full go through the markers' trap.
	shimBusyInterval = 2 * time.Millisecond
)

// pollShim sets how long the session waits before its next read from how
// full the ring is now.
func (s *Session) pollShim() {
	r := s.bpf.ring
	r.Stamp(sys.Monotonic()) // the samplers go inert when the stamps stop
	if r.Pending() >= r.Size()/8 {
		s.PollInterval = shimBusyInterval
	} else {
		s.PollInterval = shimReadInterval
	}
}

// ShimRingSpilled returns how many of the sampler's records went to the
// markers because the shared ring was full or its lock held too long (0
// without a ring).
func (s *Session) ShimRingSpilled() uint64 {
	if s.bpf.ring == nil {
		return s.bpf.ringSpilled
	}
	n, _ := s.bpf.ring.Counts()
	return n
}

// openShimRing creates the ring a launched command's sampler writes
// into, when samples copy the stack (the sampler copies it as the BPF
// programs would; with frame pointers the programs walk them, and the
// markers serve). A ring that cannot be made leaves the markers.
func (s *Session) openShimRing() {
	uw := s.Unwinder()
	if uw == nil {
		return
	}
	r, err := allocshim.CreateRing("", shimRingBytes, min(uw.StackBytes(), allocshim.MaxRingStack), 0)
	if err != nil {
		return
	}
	s.bpf.ring, s.bpf.ringUsed = r, true
	s.PollInterval = shimReadInterval
}

// nextShim reads the ring's next record into b.ringRec. Records too
// short to be the programs' are counted lost and skipped, and a ring
// whose prefixes are broken is skipped to its end (counted once).
func (s *Session) nextShim() {
	b := s.bpf
	b.ringPending = false
	for {
		rec, ok, err := b.ring.Next()
		if err != nil {
			s.ReportLost(&format.Lost{Time: sys.Monotonic(), Count: 1, Reason: format.LostUnknown})
			return
		}
		if !ok {
			return
		}
		if len(rec) < bpfHdrSize {
			s.ReportLost(&format.Lost{Time: sys.Monotonic(), Count: 1, Reason: format.LostUnknown})
			b.ring.Advance()
			continue
		}
		b.ringPending, b.ringRec, b.ringTime = true, rec, binary.LittleEndian.Uint64(rec[16:])
		return
	}
}

// handleShim reports one record of the ring: an allocation's stack, its
// block, or a free. Any other kind is not the sampler's (counted lost).
func (s *Session) handleShim(rec []byte) {
	b := s.bpf
	b.ringRecords++
	switch k := binary.LittleEndian.Uint32(rec); {
	case b.alloc == nil:
	case k == bpfKindAlloc && len(rec) > bpfHdrSize,
		(k == bpfKindAllocRet || k == bpfKindFree) && len(rec) == bpfHdrSize:
		s.handleBPF(rec)
		return
	}
	s.ReportLost(&format.Lost{Time: sys.Monotonic(), Count: 1, Reason: format.LostUnknown})
}

// ShimRingRecords returns how many records the session has read from the
// sampler's shared ring (0 without one).
func (s *Session) ShimRingRecords() uint64 { return s.bpf.ringRecords }
