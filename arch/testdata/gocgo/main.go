// Command gocgo is a Go fixture with cgo for the arch tests: its runtime
// links the C-to-Go call path (runtime.cgocallback) that a pure Go
// binary leaves out.
package main

// static int twice(int n) { return 2 * n; }
import "C"

import (
	"fmt"
	"os"
)

//go:noinline
func middle(n int) int { return int(C.twice(C.int(n))) + 1 }

func main() {
	fmt.Println(middle(len(os.Args)))
}
