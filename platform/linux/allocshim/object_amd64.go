package allocshim

import _ "embed"

// Object is the sampler's shared object for this architecture (x86-64,
// glibc), built by src/build.sh.
//
//go:embed src/librawstack-alloc.so
var Object []byte

// Built says the sampler is built for this architecture.
const Built = true
