//go:build linux

package tracer

import (
	"encoding/binary"
	"io"
	"testing"

	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// sampleRecords lays out n PERF_RECORD_SAMPLE records as the kernel writes
// them into the ring (sample_type IP|TID|TIME|CPU|PERIOD|CALLCHAIN), with
// user call chains of the given depth drawn from distinct stacks.
func sampleRecords(n, depth, distinct int) []byte {
	le := binary.LittleEndian
	var b []byte
	for i := 0; i < n; i++ {
		size := 8 + 48 + 8*(1+depth)
		rec := make([]byte, size)
		le.PutUint32(rec, 9)     // PERF_RECORD_SAMPLE
		le.PutUint16(rec[4:], 2) // PERF_RECORD_MISC_USER
		le.PutUint16(rec[6:], uint16(size))
		p := rec[8:]
		base := uint64(0x401000 + 0x100*(i%distinct))
		le.PutUint64(p, base)
		le.PutUint32(p[8:], 1000)
		le.PutUint32(p[12:], 1000+uint32(i%4))
		le.PutUint64(p[16:], uint64(1e9+i*1000000))
		le.PutUint32(p[24:], uint32(i%2))
		le.PutUint64(p[32:], 1000000)
		le.PutUint64(p[40:], uint64(1+depth))
		le.PutUint64(p[48:], ^uint64(512)+1) // PERF_CONTEXT_USER
		for d := 0; d < depth; d++ {
			le.PutUint64(p[56+8*d:], base+uint64(d)*0x40)
		}
		b = append(b, rec...)
	}
	return b
}

// replayTracer is a Tracer with no kernel behind it, writing to io.Discard,
// fed through the Linux back end's record decoding.
func replayTracer(tb testing.TB) (*Tracer, *tracking.Tracker) {
	t, err := newTracer(Options{Streams: []io.Writer{io.Discard}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		t.mu.Lock()
		t.w.Flush()
		t.closed = true
		t.mu.Unlock()
		t.closeStreams()
	})
	return t, tracking.NewReplay(1000, (*handler)(t))
}

// TestEncodePathAllocs pins the ring → decode → intern → encode → fan-out
// path at zero allocations per sample once stacks are interned.
func TestEncodePathAllocs(t *testing.T) {
	_, rp := replayTracer(t)
	recs := sampleRecords(256, 24, 32)
	rp.Replay(recs) // intern the stacks
	allocs := testing.AllocsPerRun(200, func() {
		if n := rp.Replay(recs); n != len(recs) {
			t.Fatalf("replayed %d of %d bytes", n, len(recs))
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per 256 samples, want 0", allocs)
	}
}

// BenchmarkEncodePath measures host CPU per sample on the ring → encoder
// path (24-frame user stacks, 32 distinct). Run with
// go test -run XXX -bench EncodePath ./tracer
func BenchmarkEncodePath(b *testing.B) {
	_, rp := replayTracer(b)
	const n = 256
	recs := sampleRecords(n, 24, 32)
	rp.Replay(recs)
	b.ReportAllocs()
	b.SetBytes(int64(len(recs)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rp.Replay(recs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
}
