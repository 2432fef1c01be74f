//go:build !race

package tracer

// nextSeq issues the ring's next span sequence number; only the goroutine
// pinned to the ring's P calls it (see span_race.go).
func (r *spanRing) nextSeq() uint64 { r.seq++; return r.seq }
