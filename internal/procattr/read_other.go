//go:build !linux

package procattr

import "github.com/rawstack/rawstack/format"

// On other systems a process's attributes are not read (yet): Windows
// has no cgroups, and its environment blocks need the target's memory.
func hostID() string { return "" }

func read(int) []format.Label { return nil }
