// Command embedsvc is the embed benchmark's service: an HTTP server on
// loopback whose handler decodes a JSON request, hashes it with SHA-256
// and encodes a JSON reply, under load from client goroutines in the same
// process, with a profiler in the process or none. It prints the
// requests served per second over the measured interval.
//
//	embedsvc -profiler none|pprof|tracer [-hz N] [-backend perf|ebpf] [-d DURATION] [-clients N] [-trace FILE]
//
// The tracer writes its trace to -trace (default: discarded), as a
// service would stream it to a file or a collector.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/rawstack/rawstack/platform/linux/ebpf" // tracer.BackendEBPF
	"github.com/rawstack/rawstack/tracer"
)

type request struct {
	ID    int      `json:"id"`
	Name  string   `json:"name"`
	Items []string `json:"items"`
	Data  string   `json:"data"`
}

type reply struct {
	ID     int    `json:"id"`
	Digest string `json:"digest"`
	Count  int    `json:"count"`
}

func handle(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h := sha256.New()
	for i := 0; i < 8; i++ {
		io.WriteString(h, req.Data)
		for _, it := range req.Items {
			io.WriteString(h, it)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(reply{ID: req.ID, Digest: hex.EncodeToString(h.Sum(nil)), Count: len(req.Items)})
}

func main() {
	prof := flag.String("profiler", "none", "none, pprof or tracer")
	hz := flag.Int("hz", 100, "sampling frequency")
	backend := flag.String("backend", "perf", "the tracer's back end: perf or ebpf")
	dur := flag.Duration("d", 2*time.Second, "measured interval")
	clients := flag.Int("clients", 4, "client goroutines")
	traceOut := flag.String("trace", "", "the tracer's trace file (default: discarded)")
	rtrace := flag.String("rtrace", "", "write a runtime/trace of the measured interval to this file")
	cpuprof := flag.String("cpuprofile", "", "also write a runtime/pprof CPU profile of the measured interval (for looking at a profiler's cost)")
	stats := flag.Bool("stats", false, "print the process's CPU time and context switches over the measured interval to stderr")
	flag.Parse()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: http.HandlerFunc(handle)}
	go srv.Serve(ln)
	url := "http://" + ln.Addr().String() + "/"

	var stop func()
	switch *prof {
	case "none":
	case "pprof":
		runtime.SetCPUProfileRate(*hz)
		if err := pprof.StartCPUProfile(io.Discard); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		stop = pprof.StopCPUProfile
	case "tracer":
		var out io.Writer = io.Discard
		if *traceOut != "" {
			f, err := os.Create(*traceOut)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			defer f.Close()
			out = f
		}
		opts := tracer.Options{Frequency: *hz, Streams: []io.Writer{out}}
		if *backend == "ebpf" {
			opts.Backend = tracer.BackendEBPF
		}
		t, err := tracer.Start(context.Background(), opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		stop = func() { t.Stop() }
	default:
		fmt.Fprintln(os.Stderr, "unknown profiler", *prof)
		os.Exit(2)
	}

	body, _ := json.Marshal(request{ID: 1, Name: "order", Items: []string{"apple", "pear", "plum", "fig"}, Data: string(bytes.Repeat([]byte("x"), 512))})
	tr := &http.Transport{MaxIdleConnsPerHost: *clients}
	cl := &http.Client{Transport: tr}
	var served atomic.Int64
	var measuring atomic.Bool
	done := make(chan struct{})
	var wg sync.WaitGroup
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				resp, err := cl.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if measuring.Load() {
					served.Add(1)
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // warm up: connections, the profiler's start
	if *rtrace != "" {
		f, err := os.Create(*rtrace)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer f.Close()
		trace.Start(f)
	}
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(*dur)
	n := served.Load()
	el := time.Since(start)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	if *rtrace != "" {
		trace.Stop()
	}
	if *cpuprof != "" {
		pprof.StopCPUProfile()
	}
	close(done)
	wg.Wait()
	if stop != nil {
		stop()
	}
	if *stats {
		cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
		fmt.Fprintf(os.Stderr, "%d requests in %v: CPU %v (%.1f us/request), %d voluntary and %d involuntary context switches (%.2f, %.2f per ms)\n",
			n, el.Round(time.Millisecond), cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(n),
			ru1.Nvcsw-ru0.Nvcsw, ru1.Nivcsw-ru0.Nivcsw, float64(ru1.Nvcsw-ru0.Nvcsw)/float64(el.Milliseconds()), float64(ru1.Nivcsw-ru0.Nivcsw)/float64(el.Milliseconds()))
	}
	fmt.Printf("%.0f\n", float64(n)/el.Seconds())
}
