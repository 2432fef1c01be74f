// Command selfprofile embeds the rawstack tracer: it samples its own
// process while it does some work, marks a point with Capture, and writes
// the trace to a file that `rawstack report` or `rawstack info` can read.
//
//	go run ./examples/selfprofile -o self.rawstack && go run ./cmd/rawstack report self.rawstack
//
// Self-profiling needs no privileges (kernel.perf_event_paranoid=2 allows
// sampling one's own user space).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/rawstack/rawstack/tracer"
)

func main() {
	out := flag.String("o", "self.rawstack", "trace file to write")
	d := flag.Duration("d", 2*time.Second, "how long to work")
	hz := flag.Int("F", 999, "sampling frequency, Hz")
	flag.Parse()

	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	t, err := tracer.Start(context.Background(), tracer.Options{Frequency: *hz, Streams: []io.Writer{f}})
	if err != nil {
		log.Fatal(err)
	}

	end := time.Now().Add(*d)
	n := 0
	for time.Now().Before(end) {
		n += hashMany(200000) % 7
		n += sortMany(2000) % 7
	}
	t.Capture("work done") // this goroutine's stack, as a Marker

	if err := t.Stop(); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
	st := t.Stats()
	fmt.Fprintf(os.Stderr, "selfprofile: wrote %s: %d samples, %d lost, %d threads, %d modules (%d)\n",
		*out, st.Samples, st.Lost+st.Dropped, st.Threads, st.Modules, n%2)
	if st.Suspensions > 0 { // back ends that suspend threads (Windows)
		fmt.Fprintf(os.Stderr, "selfprofile: threads suspended %d times, p50 %v, p99 %v, max %v\n",
			st.Suspensions, st.SuspendP50, st.SuspendP99, st.SuspendMax)
	}
	if st.TickHz > 0 { // back ends that measure the rate they achieve (Windows)
		fmt.Fprintf(os.Stderr, "selfprofile: %.0f samples per CPU-second of %d Hz asked (%.0f rounds/s)\n",
			st.AchievedHz, st.AskedHz, st.TickHz)
	}
}

//go:noinline
func hashMany(n int) int {
	h := uint64(14695981039346656037)
	for i := 0; i < n; i++ {
		h ^= uint64(i)
		h *= 1099511628211
	}
	return int(h >> 1)
}

//go:noinline
func sortMany(n int) int {
	s := make([]int, n)
	for i := range s {
		s[i] = (i * 7919) % n
	}
	for i := 1; i < len(s); i++ { // insertion sort: slow on purpose
		for j := i; j > 0 && s[j-1] > s[j]; j-- {
			s[j-1], s[j] = s[j], s[j-1]
		}
	}
	return s[n/2]
}
