package ebpf

import "github.com/rawstack/rawstack/platform/linux/allocshim"

// ErrNoAllocator says no allocator to put uprobes on was found for a
// process: a statically linked binary, or one whose allocator is none
// of allocatorLibs (package allocshim's, kept here for callers of this
// package).
var ErrNoAllocator = allocshim.ErrNoAllocator

// AllocatorError names the binary whose allocator was not found.
type AllocatorError = allocshim.AllocatorError
