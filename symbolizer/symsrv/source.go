package symsrv

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/pdb"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

// OpenPE returns a Source for the RVAs of the PE image at path: its PDB
// (found by [Locate]) when there is a matching one, else its export table,
// which names exported functions only. The returned error is nil in both
// cases; it is non-nil when the image cannot be read.
func OpenPE(path string, o *Options) (symbolizer.Source, error) {
	img, err := pe.Open(path)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	if cv, err := img.CodeView(); err == nil {
		if p, err := Locate(context.Background(), path, cv, o); err == nil {
			f, err := pdb.Open(p)
			if err != nil {
				return nil, err
			}
			return f, nil
		} else if !errors.Is(err, ErrNotFound) {
			return nil, err
		} else if o != nil {
			o.logf("%v", err)
		}
	}
	exps, err := img.Exports()
	if err != nil {
		return nil, err
	}
	return newExportSource(img, exps), nil
}

// exportSource names addresses by the nearest exported function before
// them, within the same executable section.
type exportSource struct {
	rvas  []uint32
	names []string
	ends  []uint32 // end of the section holding each export
}

func newExportSource(img *pe.File, exps []pe.Export) *exportSource {
	s := &exportSource{}
	type ent struct {
		rva  uint32
		name string
		end  uint32
	}
	var ents []ent
	for _, e := range exps {
		// Exports by ordinal only have no name but still end the
		// function before them, as in llvm-symbolizer.
		if e.Forwarder != "" || e.RVA == 0 {
			continue
		}
		for _, sec := range img.PE.Sections {
			const execute = 0x20000000
			if sec.Characteristics&execute != 0 && e.RVA >= sec.VirtualAddress && e.RVA-sec.VirtualAddress < sec.VirtualSize {
				ents = append(ents, ent{e.RVA, e.Name, sec.VirtualAddress + sec.VirtualSize})
			}
		}
	}
	sort.SliceStable(ents, func(i, j int) bool { return ents[i].rva < ents[j].rva })
	for _, e := range ents {
		s.rvas = append(s.rvas, e.rva)
		s.names = append(s.names, e.name)
		s.ends = append(s.ends, e.end)
	}
	return s
}

// Symbolize implements symbolizer.Source.
func (s *exportSource) Symbolize(addr uint64, dst []symbolizer.Frame) ([]symbolizer.Frame, error) {
	i := sort.Search(len(s.rvas), func(i int) bool { return uint64(s.rvas[i]) > addr }) - 1
	if i < 0 || addr >= uint64(s.ends[i]) {
		return dst, nil
	}
	return append(dst, symbolizer.Frame{Function: pdb.Demangle(s.names[i])}), nil
}

// Close implements symbolizer.Source.
func (s *exportSource) Close() error { return nil }

func (s *exportSource) String() string { return fmt.Sprintf("exports (%d functions)", len(s.rvas)) }
