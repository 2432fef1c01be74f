// Package selfprof lets a rawstack command profile itself with
// runtime/pprof, for measuring rawstack rather than for users: with
// RAWSTACK_SELFPROFILE=DIR in its environment, a command that calls
// [Start] writes DIR/NAME-PID.cpu.pprof and, when the returned stop runs,
// DIR/NAME-PID.heap.pprof (also every 20 seconds before, so that the heap
// of a long run can be read while it runs). Children started by the command inherit the
// variable, so the agent and its rawstack-otlp companion both write theirs.
//
//	stop := selfprof.Start("rawstack-ebpf")
//	defer stop()
//	go tool pprof -top DIR/rawstack-ebpf-PID.cpu.pprof
package selfprof

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"
)

// Env names the variable that turns self-profiling on.
const Env = "RAWSTACK_SELFPROFILE"

// Start begins a CPU profile when RAWSTACK_SELFPROFILE names a directory;
// stop ends it and writes a heap profile. Without the variable both do
// nothing. Failures are reported on standard error, never fatal.
func Start(name string) (stop func()) {
	dir := os.Getenv(Env)
	if dir == "" {
		return func() {}
	}
	base := filepath.Join(dir, fmt.Sprintf("%s-%d", name, os.Getpid()))
	cpu, err := os.Create(base + ".cpu.pprof")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, Env, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, Env, err)
	}
	writeHeap := func() {
		heap, err := os.Create(base + ".heap.pprof")
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, Env, err)
			return
		}
		defer heap.Close()
		if err := pprof.WriteHeapProfile(heap); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, Env, err)
		}
	}
	done := make(chan struct{})
	go func() {
		tk := time.NewTicker(20 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				writeHeap()
			}
		}
	}()
	return func() {
		close(done)
		pprof.StopCPUProfile()
		cpu.Close()
		runtime.GC()
		writeHeap()
	}
}
