//go:build linux || darwin || freebsd || netbsd || openbsd

package mapfile

import (
	"os"
	"syscall"
)

func mapFile(f *os.File, size int) ([]byte, bool, error) {
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil, false, err
	}
	return b, true, nil
}

func unmap(b []byte) error { return syscall.Munmap(b) }
