package format

import (
	"bytes"
	"io"
	"math/rand"
	"testing"
)

// benchStacks returns n distinct 32-frame stacks shaped like a real
// program's: return addresses inside a few MB of text, sharing callers.
func benchStacks(n int) [][]uint64 {
	rng := rand.New(rand.NewSource(42))
	stacks := make([][]uint64, n)
	for i := range stacks {
		pcs := make([]uint64, 32)
		for j := range pcs {
			pcs[j] = 0x5555_5555_0000 + uint64(rng.Intn(4<<20))
		}
		stacks[i] = pcs
	}
	return stacks
}

// benchStream encodes nstacks interned stacks and then nsamples samples at
// ~1 kHz over 4 threads, picking stacks with a skewed distribution.
func benchStream(tb testing.TB, nstacks, nsamples int) []byte {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader, nil)
	if err != nil {
		tb.Fatal(err)
	}
	for i, pcs := range benchStacks(nstacks) {
		w.WriteStack(uint64(i+1), pcs)
	}
	rng := rand.New(rand.NewSource(7))
	tm := int64(1 << 40)
	for i := 0; i < nsamples; i++ {
		tm += 1_000_000 + rng.Int63n(20_000)
		w.WriteSample(Sample{Time: tm, Pid: 4000, Tid: 4000 + uint32(rng.Intn(4)), CPU: uint32(rng.Intn(2)), Weight: 1, Stack: 1 + uint64(rng.Intn(nstacks))})
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkEncodeSample: a Sample whose stack is already interned.
func BenchmarkEncodeSample(b *testing.B) {
	w, _ := NewWriter(io.Discard, testHeader, nil)
	rng := rand.New(rand.NewSource(7))
	stacks := make([]uint64, 4096)
	for i := range stacks {
		stacks[i] = 1 + uint64(rng.Intn(1000))
	}
	tm := int64(1 << 40)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tm += 1_000_000
		w.WriteSample(Sample{Time: tm, Pid: 4000, Tid: 4001, CPU: 1, Weight: 1, Stack: stacks[i&4095]})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkEncodeStack32: interning a new 32-frame stack.
func BenchmarkEncodeStack32(b *testing.B) {
	w, _ := NewWriter(io.Discard, testHeader, nil)
	stacks := benchStacks(1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.WriteStack(uint64(i+1), stacks[i%1000])
	}
}

// BenchmarkDecodeSamples decodes a stream of 1000 32-frame stacks and
// 100000 samples and reports bytes/sample (the stacks included).
func BenchmarkDecodeSamples(b *testing.B) {
	const nsamples = 100000
	data := benchStream(b, 1000, nsamples)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	events := 0
	for i := 0; i < b.N; i++ {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		for {
			_, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			events++
		}
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(len(data))/nsamples, "bytes/sample")
}

// TestBytesPerSample pins the size target of the format: samples over 1000
// distinct interned 32-frame stacks average at most 16 bytes each,
// stack definitions included. (A size, not a time: deterministic.)
func TestBytesPerSample(t *testing.T) {
	const nsamples = 100000
	data := benchStream(t, 1000, nsamples)
	per := float64(len(data)) / nsamples
	t.Logf("%d bytes for %d samples over 1000 stacks: %.2f bytes/sample", len(data), nsamples, per)
	if per > 16 {
		t.Fatalf("%.2f bytes/sample, want <= 16", per)
	}
}
