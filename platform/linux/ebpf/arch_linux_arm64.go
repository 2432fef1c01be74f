package ebpf

import _ "embed"

// object is bpf/rawstack.bpf.c compiled for arm64 by bpf/build.sh.
//
//go:embed bpf/rawstack_arm64_bpfel.o
var object []byte

const (
	// libTriple names the multiarch library directories.
	libTriple = "aarch64-linux-gnu"
)
