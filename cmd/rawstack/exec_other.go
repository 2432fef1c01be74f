//go:build !unix

package main

import (
	"fmt"

	"github.com/rawstack/rawstack/platform"
)

// execInPlace is exec(2), which this system does not have: the caller
// runs the program as a child instead.
func execInPlace(path string, args []string) error {
	return fmt.Errorf("exec %s: %w", path, platform.ErrNotSupported)
}
