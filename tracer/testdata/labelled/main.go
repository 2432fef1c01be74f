// Command labelled burns CPU in two goroutines labelled with
// runtime/pprof.Do (phase=a and phase=b) for a known split of thread CPU
// time (argument: seconds of CPU for phase a; phase b gets half of it),
// then prints what each goroutine's thread really used, as
// "split a=NS b=NS" (to the file named by a second argument, if given).
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

var sink uint64

// threadCPU is the calling thread's CPU time in ns.
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
	secs := 0.6
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	var a, b int64
	var wg sync.WaitGroup
	wg.Add(2)
	go pprof.Do(context.Background(), pprof.Labels("phase", "a"), func(context.Context) {
		defer wg.Done()
		a = burn(time.Duration(secs * float64(time.Second)))
	})
	go pprof.Do(context.Background(), pprof.Labels("phase", "b"), func(context.Context) {
		defer wg.Done()
		b = burn(time.Duration(secs / 2 * float64(time.Second)))
	})
	wg.Wait()
	line := fmt.Sprintf("split a=%d b=%d\n", a, b)
	if len(os.Args) > 2 {
		os.WriteFile(os.Args[2], []byte(line), 0o644)
		return
	}
	fmt.Print(line)
}
