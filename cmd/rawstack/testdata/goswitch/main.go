// Command goswitch is the fixture of the Go stack-switch tests: Go code
// whose time is spent across the runtime's stack switches, with its own
// runtime/pprof CPU profile of the same run as the oracle.
//
//	goswitch cgo|callback|alloc|chan DURATION PROFILE|-
//
// cgo: main.goCaller → main.goTop calls C (built -O2
// -fomit-frame-pointer: c_work → c_mid → c_leaf), through
// runtime.asmcgocall onto the thread's g0 stack. callback: C calls back
// into Go (main.goCallback → main.spinGo) through runtime.cgocallback.
// alloc: main.allocTop allocates large blocks, and half of its CPU runs on
// the g0 stack under runtime.systemstack (the allocator, GC assists).
// chan: pairs of goroutines hand values over channels (main.pingPong),
// so the scheduler runs on g0 under runtime.mcall.
//
// The profile is taken at 1000 Hz: at pprof's default 100 Hz a share
// carries a few points of sampling noise. (The runtime then warns that
// StartCPUProfile cannot set its own rate; the profile's period field
// says 100 Hz, so its times are off, its shares are not.) "-" takes
// none: SIGPROF's delivery shows in a recorder's samples.
package main

/*
#cgo CFLAGS: -O2 -fomit-frame-pointer
unsigned long c_work(unsigned long x);
void c_outer(int n);
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"
)

var sink uint64

//go:noinline
func goTop(x uint64) uint64 { return uint64(C.c_work(C.ulong(x))) }

//go:noinline
func goCaller(end time.Time) {
	for time.Now().Before(end) {
		sink += goTop(sink)
	}
}

//export goCallback
func goCallback(n C.int) { sink += spinGo(uint64(n)) }

//go:noinline
func spinGo(x uint64) uint64 {
	for i := 0; i < 200000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func cbCaller(end time.Time) {
	for time.Now().Before(end) {
		C.c_outer(3)
	}
}

var keep [][]byte

//go:noinline
func allocTop(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		b := make([]byte, 64<<10)
		b[i%len(b)] = byte(i)
		keep = append(keep, b)
		if len(keep) > 64 {
			keep = keep[:0]
		}
		s += len(b)
	}
	return s
}

//go:noinline
func compute(n int) int {
	x := 1
	for i := 0; i < n; i++ {
		x = x*31 + i
	}
	return x
}

//go:noinline
func allocLoop(end time.Time) {
	t := 0
	for time.Now().Before(end) {
		t += allocTop(100) + compute(200000)
	}
	sink += uint64(t)
}

//go:noinline
func pingPong(in <-chan int, out chan<- int) {
	for v := range in {
		out <- v + 1
	}
	close(out)
}

//go:noinline
func chanLoop(end time.Time) {
	var done = make(chan int)
	for p := 0; p < 4; p++ {
		a, b := make(chan int), make(chan int)
		go pingPong(a, b)
		go func() {
			n := 0
			for time.Now().Before(end) {
				a <- n
				n = <-b
			}
			close(a)
			for range b {
			}
			done <- n
		}()
	}
	for p := 0; p < 4; p++ {
		sink += uint64(<-done)
	}
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: goswitch cgo|callback|alloc|chan DURATION PROFILE")
		os.Exit(2)
	}
	d, err := time.ParseDuration(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var f *os.File
	if os.Args[3] != "-" {
		if f, err = os.Create(os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		runtime.SetCPUProfileRate(1000)
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	end := time.Now().Add(d)
	switch os.Args[1] {
	case "cgo":
		goCaller(end)
	case "callback":
		cbCaller(end)
	case "alloc":
		allocLoop(end)
	case "chan":
		chanLoop(end)
	default:
		fmt.Fprintln(os.Stderr, "unknown work", os.Args[1])
		os.Exit(2)
	}
	if f != nil {
		pprof.StopCPUProfile()
		f.Close()
	}
	fmt.Println(sink)
}
