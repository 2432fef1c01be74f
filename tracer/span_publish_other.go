//go:build race || !amd64

package tracer

import "sync/atomic"

// publish stores a ring's new head with release semantics (see
// span_publish_amd64.go).
func publish(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
