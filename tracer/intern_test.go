package tracer

import (
	"bytes"
	"io"
	"math/rand"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform"
)

// TestStackTableCapped feeds stacks that never repeat, and some that do,
// through a tracer whose stack table is capped small, reads the stream
// back and checks that the table stayed under its cap, that ids were never
// redefined, and that every sample's stack id resolves, in stream order,
// to the PCs it was recorded with (per-chunk decodability survives the
// resets).
func TestStackTableCapped(t *testing.T) {
	var out bytes.Buffer
	tr, err := newTracer(Options{Streams: []io.Writer{&out}, ChunkSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	tr.stacks.maxPCs, tr.stacks.maxStacks = 4096, 300
	h := (*handler)(tr)
	rng := rand.New(rand.NewSource(1))
	var want [][]uint64
	hot := []uint64{0x401000, 0x402000, 0x403000} // repeats across resets
	for i := 0; i < 20000; i++ {
		pcs := hot
		if i%3 != 0 {
			pcs = make([]uint64, 1+rng.Intn(200))
			for j := range pcs {
				pcs[j] = 0x400000 + uint64(rng.Intn(1<<20))
			}
		}
		want = append(want, pcs)
		h.Sample(&platform.Sample{Time: int64(i), Pid: 1, Tid: 1, PCs: pcs})
		if n := len(tr.stacks.pcs); n > tr.stacks.maxPCs {
			t.Fatalf("sample %d: table holds %d PCs, cap %d", i, n, tr.stacks.maxPCs)
		}
		if n := len(tr.stacks.entries); n > tr.stacks.maxStacks {
			t.Fatalf("sample %d: table holds %d stacks, cap %d", i, n, tr.stacks.maxStacks)
		}
	}
	if tr.stacks.resets == 0 {
		t.Fatal("the table never reset: the test does not reach the cap")
	}
	tr.mu.Lock()
	tr.w.Flush()
	tr.closed = true
	tr.mu.Unlock()
	tr.closeStreams()

	r, err := format.NewReader(&out)
	if err != nil {
		t.Fatal(err)
	}
	defined := map[uint64][]uint64{}
	n := 0
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case format.KindStack:
			if _, dup := defined[ev.Stack.ID]; dup {
				t.Fatalf("stack id %d defined twice", ev.Stack.ID)
			}
			defined[ev.Stack.ID] = append([]uint64(nil), ev.Stack.PCs...)
		case format.KindSample:
			got, ok := defined[ev.Sample.Stack]
			if !ok {
				t.Fatalf("sample %d refers to stack %d before its definition", n, ev.Sample.Stack)
			}
			if !equalPCs(got, want[n]) {
				t.Fatalf("sample %d: stack %d is not the recorded one", n, ev.Sample.Stack)
			}
			n++
		}
	}
	if n != len(want) {
		t.Fatalf("read %d samples, wrote %d", n, len(want))
	}
	t.Logf("%d samples, %d stack definitions, %d resets", n, len(defined), tr.stacks.resets)
}

// TestMaxStacks: Options.MaxStacks sets the table's caps (32 PCs a stack
// on average); 0 and values above the default keep the default.
func TestMaxStacks(t *testing.T) {
	for _, c := range []struct{ in, stacks, pcs int }{
		{0, defaultMaxStacks, defaultMaxPCs},
		{16 << 10, 16 << 10, 512 << 10},
		{1 << 30, defaultMaxStacks, defaultMaxPCs},
	} {
		st := newStackTable(c.in)
		if st.maxStacks != c.stacks || st.maxPCs != c.pcs {
			t.Errorf("MaxStacks %d: caps %d stacks, %d PCs; want %d, %d", c.in, st.maxStacks, st.maxPCs, c.stacks, c.pcs)
		}
	}
}
