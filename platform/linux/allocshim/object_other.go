//go:build !amd64 && !arm64

package allocshim

// Object is empty: the sampler is built for x86-64 and arm64 only.
var Object []byte

// Built says the sampler is built for this architecture: not here (the
// eBPF back end puts uprobes on a launched command's allocator instead;
// the perf back end refuses Alloc).
const Built = false
