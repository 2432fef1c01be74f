//go:build linux && !amd64 && !arm64

package snapshot

import "github.com/rawstack/rawstack/arch"

// hostArch is the architecture of live targets: a 64-bit process of the
// host's own instruction set. A constant per GOARCH, where a map indexed
// by runtime.GOARCH was an init function run by every command.
const hostArch arch.Arch = 0 // no live targets on this architecture
