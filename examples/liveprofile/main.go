// Command liveprofile is a Go service that profiles itself all the time and
// hands a live trace to whoever asks: each request to /debug/rawstack joins
// the running tracer (hot join: the client first gets the current
// threads, modules and stacks) and receives SECONDS of samples.
//
//	go run ./examples/liveprofile &
//	curl -so live.rawstack 'localhost:6061/debug/rawstack?seconds=3'
//	go run ./cmd/rawstack report live.rawstack
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"strconv"
	"time"

	"github.com/rawstack/rawstack/tracer"
)

func main() {
	addr := flag.String("addr", "localhost:6061", "listen address")
	flag.Parse()

	t, err := tracer.Start(context.Background(), tracer.Options{Frequency: 99})
	if err != nil {
		log.Fatal(err)
	}
	defer t.Stop()

	http.HandleFunc("/debug/rawstack", func(w http.ResponseWriter, r *http.Request) {
		secs, _ := strconv.Atoi(r.URL.Query().Get("seconds"))
		if secs <= 0 || secs > 60 {
			secs = 5
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		fw := flushWriter{w, http.NewResponseController(w)}
		if err := t.AddStream(fw); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		select {
		case <-time.After(time.Duration(secs) * time.Second):
		case <-r.Context().Done():
		}
		if err := t.RemoveStream(fw); err != nil {
			log.Printf("stream to %s: %v", r.RemoteAddr, err)
		}
	})
	go work()
	log.Printf("serving live traces on http://%s/debug/rawstack?seconds=N", *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}

// flushWriter sends every chunk to the client at once.
type flushWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err == nil {
		err = f.rc.Flush()
	}
	return n, err
}

// work stands for the service's own load.
func work() {
	x := uint64(1)
	for {
		for i := 0; i < 1<<22; i++ {
			x = x*6364136223846793005 + uint64(i)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
