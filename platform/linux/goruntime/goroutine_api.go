package goruntime

import (
	"debug/elf"
	"fmt"

	"github.com/rawstack/rawstack/format"
)

// The goroutine reader's parts that package platform/snapshot/goroutines
// uses to read every g of a stopped Go process: the struct layouts from
// the executable's DWARF, and a goroutine's pprof labels.

// GoStructMembers returns, for each struct type of names found in the
// DWARF of the Go executable at path, the byte offsets of its members by
// name, and its size.
func GoStructMembers(path string, names ...string) (members map[string]map[string]uint64, sizes map[string]uint64, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	d, err := typesDWARF(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: no DWARF (built with -ldflags=-w or stripped): %w", path, err)
	}
	members, sizes = map[string]map[string]uint64{}, map[string]uint64{}
	for _, n := range names {
		members[n] = nil
	}
	if err := goStructs(d, members, sizes); err != nil {
		return nil, nil, fmt.Errorf("%s: DWARF: %w", path, err)
	}
	for n, m := range members {
		if m == nil {
			delete(members, n)
		}
	}
	return members, sizes, nil
}

// LabelReader reads goroutines' pprof labels out of a Go process's memory
// as sampling does, each distinct label set once.
type LabelReader struct {
	gr   *goReader
	sets map[uint64][]format.Label
}

// NewLabelReader returns a reader of the goroutines of the Go executable
// exe whose memory read reads (false: not readable). It reads the
// executable's layout now, so that Labels only reads the process.
func NewLabelReader(exe string, read func(addr uint64, p []byte) bool) *LabelReader {
	r := &LabelReader{
		gr:   newGoReader(func(_ uint32, addr uint64, p []byte) bool { return read(addr, p) }, func(uint32) string { return exe }),
		sets: map[uint64][]format.Label{},
	}
	r.gr.goroutine(0, 0, 0) // no g: loads the layout alone
	return r
}

// Labels returns the labels of the g at address g whose stack holds sp,
// nil if it has none or they cannot be read.
func (r *LabelReader) Labels(g, sp uint64) []format.Label {
	_, set, fresh := r.gr.goroutine(0, g, sp)
	if fresh != nil {
		r.sets[set] = fresh
	}
	return r.sets[set]
}
