package ebpf

import (
	"errors"
	"fmt"
)

// ErrNoAllocator says no allocator to put uprobes on was found for a
// process: a statically linked binary, or one whose allocator is none
// of allocatorLibs.
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
