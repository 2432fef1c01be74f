package wine

import (
	"os"

	"github.com/rawstack/rawstack/internal/unix"
)

// lockFile takes an exclusive lock on the file at path (created if
// missing), waiting for another process that holds it, and returns the
// function that releases it. The lock goes with the process: a test
// binary killed while holding it does not hold it forever.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.LockFile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
