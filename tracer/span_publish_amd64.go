//go:build !race

package tracer

// publish stores a ring's new head. x86 keeps stores in program order
// (TSO), so a plain store, in a function the compiler does not inline and
// therefore does not move the record's stores past, publishes the record
// as a release store would: the runtime's own StoreRel on amd64 is the
// same. It costs a plain MOV where atomic.StoreUint64 costs a locked XCHG
// (the largest item of a span's cost after the clock). Readers load the
// head with atomic.LoadUint64. The race detector does not see this
// ordering; race builds use span_publish_other.go.
//
//go:noinline
func publish(p *uint64, v uint64) { *p = v }
