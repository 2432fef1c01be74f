//go:build unix

package main

import (
	"os"
	"syscall"
)

// execInPlace replaces this process with path, run with args (args[0]
// is its name), in this one's environment: the program becomes the
// process, with its pid, its standard streams and the signals sent to
// it. It returns only when the exec failed.
func execInPlace(path string, args []string) error {
	return &os.PathError{Op: "exec", Path: path, Err: syscall.Exec(path, args, os.Environ())}
}
