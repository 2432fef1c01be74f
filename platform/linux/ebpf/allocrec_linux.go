//go:build linux && (amd64 || arm64)

package ebpf

import (
	"encoding/binary"

	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// Records of the allocator programs (bpf/rawstack.bpf.c), those the
// allocation sampler writes into its shared ring too: the Tracker pairs
// and reports them (platform/linux/tracking, alloc_linux.go).
const (
	bpfKindAlloc    = tracking.KindAlloc    // a sampled call's stack, weight = bytes asked for
	bpfKindAllocRet = tracking.KindAllocRet // its return: header only, weight = the block (0: none)
	bpfKindFree     = tracking.KindFree     // a sampled block was freed: header only, weight = the block
)

// allocReturn reports the allocation whose call returned the block in
// the header h.
func (s *Session) allocReturn(h []byte) {
	le := binary.LittleEndian
	s.AllocReturn(le.Uint32(h[8:]), le.Uint64(h[16:]), le.Uint64(h[24:]))
}

// allocFree reports the free of a sampled block.
func (s *Session) allocFree(h []byte) {
	le := binary.LittleEndian
	s.AllocFree(le.Uint32(h[4:]), le.Uint32(h[8:]), le.Uint64(h[16:]), le.Uint64(h[24:]))
}
