package tracer

import (
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/rawstack/rawstack/format"
)

// DefaultHeapInterval is Options.HeapInterval's default.
const DefaultHeapInterval = time.Second

// heapTotals are the unbiased totals of one allocation site already
// written to the trace.
type heapTotals struct{ allocBytes, allocObjects, freeBytes, freeObjects int64 }

// heapRecorder turns the Go runtime's heap profile (runtime.MemProfile,
// cumulative per allocation site) into Alloc and Free events: at each
// read, the growth of each site's totals since the previous read
// (format/SPEC.md §6.22–6.23, addr 0).
type heapRecorder struct {
	base map[[32]uintptr]heapTotals // the sites' allocated totals at Start
	last map[[32]uintptr]heapTotals
	recs []runtime.MemProfileRecord
	pcs  []uint64
	stop chan struct{}
	done chan struct{}
}

// startHeap takes the baseline and reads the heap profile every
// Options.HeapInterval until stopHeap.
//
// The trace counts what is allocated while recording, as the uprobes
// sampler of native allocations does (it sees nothing before it
// attaches): the totals at Start are the baseline, after a garbage
// collection that publishes the allocations made until then. A site's
// in-use figures are what its allocations made while recording still
// hold: the site's in-use total, at most what it allocated since Start
// (the runtime does not say which of a site's objects were freed, so
// the newest are taken as the ones still live).
func (t *Tracer) startHeap() {
	h := &heapRecorder{base: map[[32]uintptr]heapTotals{}, last: map[[32]uintptr]heapTotals{},
		stop: make(chan struct{}), done: make(chan struct{})}
	t.heap = h
	runtime.GC()
	rate := int64(runtime.MemProfileRate)
	for _, r := range h.read() {
		ao, ab := scaleHeapSample(r.AllocObjects, r.AllocBytes, rate)
		h.base[r.Stack0] = heapTotals{allocBytes: ab, allocObjects: ao}
	}
	iv := t.opts.HeapInterval
	if iv <= 0 {
		iv = DefaultHeapInterval
	}
	go func() {
		defer close(h.done)
		tk := time.NewTicker(iv)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				t.readHeap()
			case <-h.stop:
				return
			case <-t.done:
				return
			}
		}
	}()
}

// stopHeap ends the periodic reads and writes the last one. The runtime
// publishes a heap profile when a garbage collection ends, so a
// collection runs first: the trace then holds every allocation made
// before Stop.
func (t *Tracer) stopHeap() {
	h := t.heap
	if h == nil {
		return
	}
	close(h.stop)
	<-h.done
	runtime.GC()
	t.readHeap()
}

// read returns the runtime's heap profile, every site.
func (h *heapRecorder) read() []runtime.MemProfileRecord {
	n, _ := runtime.MemProfile(nil, true)
	for {
		if cap(h.recs) < n+64 {
			h.recs = make([]runtime.MemProfileRecord, n+64)
		}
		var ok bool
		if n, ok = runtime.MemProfile(h.recs[:cap(h.recs)], true); ok {
			return h.recs[:n]
		}
	}
}

// readHeap writes the growth of every allocation site's totals.
func (t *Tracer) readHeap() {
	h := t.heap
	recs := h.read()
	rate := int64(runtime.MemProfileRate)
	now := monotonic()
	pid := uint32(os.Getpid())
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	for i := range recs {
		r := &recs[i]
		prev := h.last[r.Stack0]
		base := h.base[r.Stack0]
		ao, ab := scaleHeapSample(r.AllocObjects, r.AllocBytes, rate)
		ao, ab = ao-base.allocObjects, ab-base.allocBytes
		io, ib := scaleHeapSample(r.InUseObjects(), r.InUseBytes(), rate)
		io, ib = min(io, max(ao, 0)), min(ib, max(ab, 0))
		// The scaling is not linear: keep every written total from
		// going down, so each event's bytes are a growth.
		cur := heapTotals{allocBytes: max(ab, prev.allocBytes), allocObjects: max(ao, prev.allocObjects)}
		cur.freeBytes = max(cur.allocBytes-ib, prev.freeBytes)
		cur.freeObjects = max(cur.allocObjects-io, prev.freeObjects)
		if cur == prev {
			continue
		}
		h.last[r.Stack0] = cur
		stk := hideRuntime(r.Stack())
		h.pcs = h.pcs[:0]
		for _, pc := range stk {
			h.pcs = append(h.pcs, uint64(pc))
		}
		if len(h.pcs) > 0 {
			h.pcs[0]-- // a return address; point into the call instruction, as Capture does
		}
		id := t.internStack(h.pcs)
		if cur.allocBytes != prev.allocBytes || cur.allocObjects != prev.allocObjects {
			t.w.WriteAlloc(format.Alloc{Time: now, Pid: pid, Stack: id,
				Bytes: uint64(cur.allocBytes - prev.allocBytes), Objects: uint64(cur.allocObjects - prev.allocObjects)})
		}
		if cur.freeBytes != prev.freeBytes || cur.freeObjects != prev.freeObjects {
			t.w.WriteFree(format.Free{Time: now, Pid: pid, Stack: id,
				Bytes: uint64(cur.freeBytes - prev.freeBytes), Objects: uint64(cur.freeObjects - prev.freeObjects)})
		}
	}
}

// hideRuntime drops the runtime's own frames at the leaf (mallocgc and
// its helpers), as runtime/pprof's heap profile does, so that a site is
// named by the function that allocated; a stack of runtime frames only
// is kept whole.
func hideRuntime(stk []uintptr) []uintptr {
	for i, pc := range stk {
		fn := runtime.FuncForPC(pc - 1)
		if fn == nil || !strings.HasPrefix(fn.Name(), "runtime.") {
			return stk[i:]
		}
	}
	return stk
}

// scaleHeapSample unbiases the totals of one allocation site sampled at
// one sample per rate bytes on average: an allocation of s bytes was
// recorded with probability 1-exp(-s/rate), so each recorded one stands
// for 1/(1-exp(-s/rate)) of them, s taken as the site's average size.
// It is the estimate runtime/pprof's heap profile shows.
func scaleHeapSample(count, size, rate int64) (int64, int64) {
	if count == 0 || size == 0 {
		return 0, 0
	}
	if rate <= 1 {
		return count, size // every allocation was recorded
	}
	avg := float64(size) / float64(count)
	scale := 1 / (1 - math.Exp(-avg/float64(rate)))
	return int64(float64(count) * scale), int64(float64(size) * scale)
}
