package radix

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortByKey checks the order and the stability against slices'
// stable sort, on keys that differ in few bytes and in all of them.
func TestSortByKey(t *testing.T) {
	type e struct{ k, seq uint64 }
	r := rand.New(rand.NewPCG(1, 2))
	for _, mask := range []uint64{0, 0xff, 0xff00ff, 0x7fff_0000_0000, ^uint64(0)} {
		for _, n := range []int{0, 1, 2, 100, 5000} {
			s := make([]e, n)
			for i := range s {
				s[i] = e{r.Uint64() & mask, uint64(i)}
			}
			want := slices.Clone(s)
			slices.SortStableFunc(want, func(a, b e) int {
				switch {
				case a.k < b.k:
					return -1
				case a.k > b.k:
					return 1
				}
				return 0
			})
			got := SortByKey(s, func(x e) uint64 { return x.k })
			if !slices.Equal(got, want) {
				t.Errorf("mask %#x, %d elements: not sorted stably", mask, n)
			}
		}
	}
}
