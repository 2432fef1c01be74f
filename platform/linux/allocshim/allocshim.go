// Package allocshim holds the allocation sampler that `rawstack record
// --alloc -- CMD` preloads into the program it launches: a small shared
// object (src/shim.c, built by src/build.sh and committed, as the BPF object is)
// that interposes malloc, calloc, realloc, free, posix_memalign,
// aligned_alloc, memalign, valloc and pvalloc, passes every call to the
// allocator the program would have called (glibc's, jemalloc's,
// tcmalloc's) and samples by bytes itself, per thread, with the Poisson
// process the BPF programs use. Only a sampled allocation calls
// [AllocSymbol], and only the free of a sampled block calls
// [FreeSymbol]: the recorder puts its two uprobes there, so that a call
// that is not sampled costs a few nanoseconds and no trap into the
// kernel (package platform/linux/ebpf).
//
// A running process (record -p PID, -a) cannot be preloaded: the eBPF
// back end puts uprobes on its allocator instead, and every call traps.
package allocshim

import (
	_ "embed"
	"fmt"
	"os"
)

//go:generate sh src/build.sh

// Object is the sampler's shared object (x86-64, glibc).
//
//go:embed src/librawstack-alloc.so
var Object []byte

const (
	// AllocSymbol is called with (block, size) for a sampled allocation;
	// a block of 0 says the sampler's set of sampled blocks was full
	// (the sample is lost).
	AllocSymbol = "rawstack_alloc_sampled"
	// FreeSymbol is called with (block) when a sampled block is freed
	// (or reallocated).
	FreeSymbol = "rawstack_free_sampled"
	// RateEnv is the environment variable that gives the sampler its
	// mean sampling interval in bytes (default 512 KiB).
	RateEnv = "RAWSTACK_ALLOC_RATE"
)

// Write writes [Object] to a new file in dir (os.TempDir() when empty),
// readable by every user so that a command run under another user can
// load it, and returns its path. The caller removes it when the command
// is gone.
func Write(dir string) (string, error) {
	f, err := os.CreateTemp(dir, "rawstack-alloc-*.so")
	if err != nil {
		return "", fmt.Errorf("writing the allocation sampler: %w", err)
	}
	_, err = f.Write(Object)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("writing the allocation sampler %s: %w", f.Name(), err)
	}
	return f.Name(), nil
}
