// Command goprog is a Go fixture for the arch tests: its .debug_frame, as
// Go's linker writes it (compressed, no .eh_frame), is checked against
// readelf.
package main

import (
	"fmt"
	"os"
	"sort"
)

//go:noinline
func leaf(n int) int { return n * 3 }

//go:noinline
func middle(v []int) int {
	sort.Ints(v)
	s := 0
	for _, x := range v {
		s += leaf(x)
	}
	return s
}

func main() {
	fmt.Println(middle([]int{len(os.Args), 3, 1, 2}))
}
