//go:build linux && !(amd64 || arm64)

package unix

// QuietChildStops does nothing on architectures whose struct sigaction
// this package does not lay out.
func QuietChildStops() (restore func(), err error) { return func() {}, nil }
