//go:build !unix

package allocshim

import (
	"fmt"

	"github.com/rawstack/rawstack/platform"
)

// private: the sampler is preloaded on Linux only.
func private(dir string) error {
	return fmt.Errorf("%s: %w", dir, platform.ErrNotSupported)
}
