package allocshim

import (
	"errors"
	"fmt"
)

// ErrNoAllocator says a process has no allocator to sample: a statically
// linked binary (nothing to preload the sampler into, no allocator
// library to put uprobes on), or one whose allocator is not a library
// the recorder knows.
var ErrNoAllocator = errors.New("no allocator to probe")

// AllocatorError names the binary whose allocator was not found.
type AllocatorError struct {
	Pid    int
	Binary string
	Reason string
}

func (e *AllocatorError) Error() string {
	return fmt.Sprintf("pid %d: %s: %v: %s", e.Pid, e.Binary, ErrNoAllocator, e.Reason)
}

func (e *AllocatorError) Unwrap() error { return ErrNoAllocator }
