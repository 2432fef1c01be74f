// Command parked is the fixture of the goroutines tests and benchmark: n
// goroutines parked in one known chain (worker -> stage1 -> stage2
// (inlined) -> stage3 -> channel receive), one goroutine spinning on a
// CPU, and optionally a /debug/pprof endpoint. It prints "ready" when
// every worker is parked.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

var (
	block   = make(chan int)
	counter atomic.Uint64
	parked  sync.WaitGroup
)

func worker(i int) {
	stage1(i)
}

//go:noinline
func stage1(i int) int {
	return stage2(i) + 1
}

// stage2 is small enough to be inlined into stage1.
func stage2(i int) int {
	return stage3(i) * 2
}

//go:noinline
func stage3(i int) int {
	parked.Done()
	return <-block + i
}

//go:noinline
func spin() {
	for {
		counter.Add(1)
	}
}

func main() {
	n := flag.Int("n", 50, "parked goroutines")
	addr := flag.String("http", "", "serve /debug/pprof on this address (host:port; port 0 picks one and prints it)")
	labels := flag.Bool("labels", false, "start every third worker under pprof labels (shard=i%3)")
	flag.Parse()
	parked.Add(*n)
	for i := 0; i < *n; i++ {
		if *labels && i%3 != 0 {
			pprof.Do(context.Background(), pprof.Labels("shard", strconv.Itoa(i%3), "kind", "worker"), func(context.Context) {
				go worker(i) // a goroutine inherits its creator's labels
			})
			continue
		}
		go worker(i)
	}
	go spin()
	parked.Wait()
	// The runtime records when a goroutine began waiting (g.waitsince)
	// when a collection scans its stack; the workers announce themselves
	// just before they block. One runtime.GC here left waitsince unset
	// (dlv agreed), two set it.
	time.Sleep(100 * time.Millisecond)
	runtime.GC()
	runtime.GC()
	for counter.Load() == 0 {
		runtime.Gosched()
	}
	if *addr != "" {
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("http", ln.Addr())
		go http.Serve(ln, nil)
	}
	fmt.Println("ready")
	time.Sleep(time.Hour)
}
