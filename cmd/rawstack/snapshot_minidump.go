package main

import (
	"os"

	"github.com/rawstack/rawstack/platform/snapshot"
)

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// snapshotDump snapshots a minidump, or a live Windows process through an
// in-memory minidump, and writes the dump to writePath if asked.
func snapshotDump(pid int, path, writePath string, opts *snapshot.Options) (*snapshot.Snapshot, error) {
	var d *snapshot.Minidump
	var err error
	if path != "" {
		d, err = snapshot.OpenMinidump(path)
	} else {
		d, err = snapshot.ProcessMinidump(pid)
	}
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if writePath != "" {
		data, err := d.Data()
		if err != nil {
			return nil, err
		}
		f, err := os.Create(writePath)
		if err != nil {
			return nil, err
		}
		err = snapshot.WriteMinidump(f, data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	s, err := d.Snapshot(opts)
	if err != nil {
		return nil, err
	}
	s.Stopped = d.Stopped()
	return s, nil
}
