// hello prints random bytes, which need ProcessPrng on Go 1.21+, and the
// process id: the smallest proof that a Go program runs under the prefix.
// With the argument "child" it first starts itself as a child process
// and prints the child's output too.
package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		self, err := os.Executable()
		if err == nil {
			var out []byte
			out, err = exec.Command(self).CombinedOutput()
			os.Stdout.Write(out)
		}
		if err != nil {
			fmt.Println("child:", err)
			os.Exit(1)
		}
	}
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		fmt.Println("rand:", err)
		os.Exit(1)
	}
	fmt.Printf("hello %d %x\n", os.Getpid(), b)
}
