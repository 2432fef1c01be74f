package main

import (
	"os"

	"github.com/rawstack/rawstack/platform/snapshot"
	"github.com/rawstack/rawstack/symbolizer"
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

// peNamer names frames of a PE image from its PDB, DWARF, Go tables or
// symbol tables (pesrc decides per address); addresses
// are virtual addresses (ImageBase + RVA).
type peNamer struct{ src symbolizer.Source }

func openPENamer(path string) namer {
	src, err := openPESource(path, nil, "")
	if err != nil {
		return nil
	}
	return &peNamer{src: src}
}

func (n *peNamer) name(addr uint64) (string, string) {
	fs, err := n.src.Symbolize(addr, nil)
	if err != nil || len(fs) == 0 {
		return "", ""
	}
	// The outermost frame is the function the address is in; inlined
	// frames come first.
	return fs[len(fs)-1].Function, ""
}

func (n *peNamer) close() { n.src.Close() }
