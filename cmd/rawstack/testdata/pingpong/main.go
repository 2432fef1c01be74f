// Command pingpong hands a token between two goroutines over unbuffered
// channels for the seconds given as its argument (default 1), so that
// much of its time is the scheduler's on the threads' g0 stacks (reached
// through runtime.mcall, started by runtime.clone), whose first frames a
// DWARF unwinder must end cleanly.
package main

import (
	"os"
	"runtime"
	"strconv"
	"time"
)

func main() {
	runtime.GOMAXPROCS(2)
	secs := 1.0
	if len(os.Args) > 1 {
		if v, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			secs = v
		}
	}
	ping, pong := make(chan int), make(chan int)
	go func() {
		for v := range ping {
			pong <- v + 1
		}
	}()
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	n := 0
	for time.Now().Before(end) {
		for i := 0; i < 1000; i++ {
			ping <- n
			n = <-pong
		}
	}
	close(ping)
	println(n)
}
