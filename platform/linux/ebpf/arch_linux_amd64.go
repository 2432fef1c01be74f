package ebpf

import _ "embed"

// object is bpf/rawstack.bpf.c compiled for x86-64 by bpf/build.sh.
//
//go:embed bpf/rawstack_x86_bpfel.o
var object []byte

const (
	// libTriple names the multiarch library directories.
	libTriple = "x86_64-linux-gnu"
)
