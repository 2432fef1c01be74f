// hello prints random bytes, which need ProcessPrng on Go 1.21+, and the
// process id: the smallest proof that a Go program runs under the prefix.
package main

import (
	"crypto/rand"
	"fmt"
	"os"
)

func main() {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		fmt.Println("rand:", err)
		os.Exit(1)
	}
	fmt.Printf("hello %d %x\n", os.Getpid(), b)
}
