// Package radix sorts by a 64-bit key with a stable least-significant-
// digit radix sort: linear in the elements, where a comparison sort of
// thousands of addresses costs a closure call per comparison.
package radix

// SortByKey sorts s by key, stably, a byte of the key at a time, skipping
// the bytes every key shares, and returns the sorted slice: s itself or
// a buffer of the same length.
func SortByKey[T any](s []T, key func(T) uint64) []T {
	var or, and uint64 = 0, ^uint64(0)
	for _, e := range s {
		k := key(e)
		or |= k
		and &= k
	}
	var tmp []T
	for shift := uint(0); shift < 64; shift += 8 {
		if (or^and)>>shift&0xff == 0 {
			continue // this byte is the same in every key
		}
		if tmp == nil {
			tmp = make([]T, len(s))
		}
		var count [257]int
		for _, e := range s {
			count[key(e)>>shift&0xff+1]++
		}
		for d := 1; d < 257; d++ {
			count[d] += count[d-1]
		}
		for _, e := range s {
			d := key(e) >> shift & 0xff
			tmp[count[d]] = e
			count[d]++
		}
		s, tmp = tmp, s
	}
	return s
}
