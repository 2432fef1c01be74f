//go:build linux && amd64 && !race

package tracer

// haveSpanCommit says spanCommit is implemented here. The race detector
// would not see its plain store of the ring's head; race builds use
// spanRing.commit.
const haveSpanCommit = true

// spanCommit stamps the record e (slot h of ring r, its name already
// stored) with the TSC, fills in id, aux, kind and the ring's cached
// thread id, and publishes it by storing h+1 as the ring's head: one call
// for what costs four in Go (reading the M, the TSC, the stores, the
// release store of the head, which on amd64 is a plain MOV after the
// record's stores since x86 keeps stores in order). It reports false,
// having written nothing, when the calling goroutine's M is not the one
// the ring's thread id belongs to; the caller then takes
// spanRing.commit. Called pinned to the ring's P, with spanFast set
// (the TSC is the clock and getm reads the M).
//
//go:noescape
func spanCommit(r *spanRing, e *spanRec, h, id, aux uint64, kind spanKind) bool
