//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package mapfile

import (
	"io"
	"os"
)

// mapFile reads the file: there is no mmap to use here.
func mapFile(f *os.File, size int) ([]byte, bool, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, false, err
	}
	return b, false, nil
}

func unmap(b []byte) error { return nil }
