//go:build linux && (amd64 || arm64)

package ebpf

import "golang.org/x/sys/unix"

var errPerm error = unix.EPERM
