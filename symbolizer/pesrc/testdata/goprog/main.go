package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

type point struct{ x, y float64 }

func sq(v float64) float64 { return v * v }

func dist(a, b point) float64 { return sq(a.x-b.x) + sq(a.y-b.y) }

func nearest(pts []point, q point) float64 {
	best := 1e300
	for _, p := range pts {
		if d := dist(p, q); d < best {
			best = d
		}
	}
	return best
}

func words(s string) map[string]int {
	m := map[string]int{}
	for _, w := range strings.Fields(s) {
		m[strings.ToLower(w)]++
	}
	return m
}

func main() {
	n := 100 + len(os.Args)
	pts := make([]point, n)
	for i := range pts {
		pts[i] = point{float64(i), float64(n - i)}
	}
	ks := []string{}
	for k := range words("The quick brown fox jumps over the lazy dog the end") {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	fmt.Println(nearest(pts, point{3, 4}), ks)
}
