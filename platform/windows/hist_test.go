package windows

import (
	"math/rand"
	"sort"
	"testing"
)

func TestHistQuantiles(t *testing.T) {
	var h hist
	r := rand.New(rand.NewSource(1))
	var vs []int64
	for i := 0; i < 10000; i++ {
		v := int64(r.ExpFloat64() * 20000)
		vs = append(vs, v)
		h.add(v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	for _, q := range []float64{0.5, 0.99} {
		want := vs[int(q*float64(len(vs)-1))]
		got := h.quantile(q)
		if d := float64(got-want) / float64(want); d > 0.07 || d < -0.07 {
			t.Errorf("q%.2f = %d, want %d within 7%%", q, got, want)
		}
	}
	if h.quantile(1) != vs[len(vs)-1] {
		t.Errorf("max = %d, want %d", h.quantile(1), vs[len(vs)-1])
	}
	for v := int64(0); v < 1<<20; v = v*3/2 + 1 {
		if b := histBucket(v); histValue(b) > v*17/16+1 || histValue(b) < v*15/16-1 {
			t.Errorf("bucket %d of %d answers %d", b, v, histValue(b))
		}
	}
}
