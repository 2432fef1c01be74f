package snapshot

import "fmt"

// Core snapshots the threads of an ELF core dump.
func Core(path string, opts *Options) (*Snapshot, error) {
	return nil, fmt.Errorf("snapshot: core files: not yet")
}
