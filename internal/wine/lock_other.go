//go:build !linux

package wine

import (
	"fmt"
	"runtime"

	"github.com/rawstack/rawstack/platform"
)

// lockFile: the Wine prefix is set up on Linux hosts only.
func lockFile(path string) (func(), error) {
	return nil, fmt.Errorf("wine prefix %s on %s: %w", path, runtime.GOOS, platform.ErrNotSupported)
}
