//go:build race

package tracer

import "sync/atomic"

// nextSeq issues the ring's next span sequence number. Goroutines pinned
// in turn to one P take turns on the ring, but the race detector does not
// see the pinning as synchronization: race builds count atomically.
func (r *spanRing) nextSeq() uint64 { return atomic.AddUint64(&r.seq, 1) }
