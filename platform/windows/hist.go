package windows

import (
	"math/bits"
	"sync/atomic"
)

// hist is a log-linear histogram of durations in ns, updated without
// allocating or locking: 16 sub-buckets per power of two (≤ 6% error).
type hist struct {
	b   [64 * 16]atomic.Uint64
	n   atomic.Uint64
	max atomic.Int64
	sum atomic.Int64
}

func histBucket(v int64) int {
	if v < 16 {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 5 // v >> e is in [16, 32)
	return e*16 + int(uint64(v)>>e)
}

func histValue(i int) int64 {
	if i < 16 {
		return int64(i)
	}
	// Bucket i holds [m<<e, (m+1)<<e); answer its middle.
	e := i/16 - 1
	m := int64(i%16 + 16)
	return m<<e + (1<<e)/2
}

func (h *hist) add(v int64) {
	h.b[histBucket(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// quantile returns the value below which a fraction q of the samples fall.
func (h *hist) quantile(q float64) int64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	want := uint64(q*float64(n-1)) + 1
	var c uint64
	for i := range h.b {
		c += h.b[i].Load()
		if c >= want {
			return min(histValue(i), h.max.Load())
		}
	}
	return h.max.Load()
}
