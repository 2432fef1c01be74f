// Command selflabelled profiles itself with the tracer (Options.Goroutines)
// into the file named by its first argument while two goroutines labelled
// with runtime/pprof.Do (phase=a, phase=b) burn 0.6 s and 0.2 s of thread
// CPU, then prints what each really used, as "split a=NS b=NS". It is
// built with go build, which keeps the DWARF the tracer reads the g's
// layout from (go test links its test binaries with -w).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/rawstack/rawstack/tracer"
)

var sink uint64

func threadCPU() int64 {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

//go:noinline
func burn(d time.Duration) int64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	x := uint64(1)
	for threadCPU()-start < int64(d) {
		for i := 0; i < 10000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink += x
	return threadCPU() - start
}

func main() {
	f, err := os.Create(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	t, err := tracer.Start(context.Background(), tracer.Options{Frequency: 999, Streams: []io.Writer{f}, Goroutines: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	var a, b int64
	var wg sync.WaitGroup
	wg.Add(2)
	go pprof.Do(context.Background(), pprof.Labels("phase", "a"), func(context.Context) {
		defer wg.Done()
		a = burn(600 * time.Millisecond)
	})
	go pprof.Do(context.Background(), pprof.Labels("phase", "b"), func(context.Context) {
		defer wg.Done()
		b = burn(200 * time.Millisecond)
	})
	wg.Wait()
	if err := t.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	f.Close()
	fmt.Printf("split a=%d b=%d\n", a, b)
}
