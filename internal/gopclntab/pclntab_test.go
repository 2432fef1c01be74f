package gopclntab

import (
	"encoding/binary"
	"errors"
	"testing"
)

var le = binary.LittleEndian

// synth builds a Go 1.20 table with two functions: main.f at text+0
// (lines 10 then 12; at +0x10 it runs main.inl inlined from f's +0x4),
// and main.g at text+0x20, in files a.go and b.go.
func synth() (tab []byte, tree []byte) {
	names := []byte("main.f\x00main.g\x00main.inl\x00")
	files := []byte("a.go\x00b.go\x00")
	cutab := le.AppendUint32(le.AppendUint32(nil, 0), 5)
	pctab := []byte{0}
	add := func(b ...byte) uint32 { off := uint32(len(pctab)); pctab = append(pctab, b...); return off }
	flnF := add(22, 0x10, 4, 0x10, 0) // line 10 on [0,0x10), 12 on [0x10,0x20)
	ffileF := add(2, 0x20, 0)         // file 0
	finl := add(0, 0x10, 2, 0x10, 0)  // inline index -1, then 0
	flnG := add(2*30, 0x20, 0)        // line 29
	ffileG := add(4, 0x20, 0)         // file 1
	rec := func(entry, name, pcfile, pcln uint32, pcdata, funcdata []uint32) []byte {
		var b []byte
		for _, v := range []uint32{entry, name, 0, 0, 0, pcfile, pcln, uint32(len(pcdata)), 0, 1} {
			b = le.AppendUint32(b, v)
		}
		b = append(b, 0, 0, 0, byte(len(funcdata)))
		for _, v := range pcdata {
			b = le.AppendUint32(b, v)
		}
		for _, v := range funcdata {
			b = le.AppendUint32(b, v)
		}
		return b
	}
	rf := rec(0, 0, ffileF, flnF, []uint32{0, 0, finl}, []uint32{^uint32(0), ^uint32(0), ^uint32(0), 0})
	rg := rec(0x20, 7, ffileG, flnG, nil, nil)
	var functab []byte
	functab = le.AppendUint32(le.AppendUint32(functab, 0), 24)
	functab = le.AppendUint32(le.AppendUint32(functab, 0x20), 24+uint32(len(rf)))
	functab = le.AppendUint32(le.AppendUint32(functab, 0x40), 0)
	functab = append(append(functab, rf...), rg...)

	hdr := []byte{0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8}
	off := uint64(8 + 8*8)
	words := []uint64{2, 2, 0x401000}
	for _, part := range [][]byte{names, cutab, files, pctab} {
		words = append(words, off)
		off += uint64(len(part))
	}
	words = append(words, off)
	for _, w := range words {
		hdr = le.AppendUint64(hdr, w)
	}
	tab = append(append(append(append(append(hdr, names...), cutab...), files...), pctab...), functab...)
	// inlinedCall{funcID, _[3], nameOff "main.inl", parentPc 4, startLine}
	tree = append([]byte{0, 0, 0, 0}, le.AppendUint32(le.AppendUint32(le.AppendUint32(nil, 14), 4), 1)...)
	return tab, tree
}

const gofunc = 0x500000

func reader(tree []byte) func(addr uint64, p []byte) bool {
	return func(addr uint64, p []byte) bool {
		if addr < gofunc || addr-gofunc > uint64(len(tree)) || uint64(len(p)) > uint64(len(tree))-(addr-gofunc) {
			return false
		}
		copy(p, tree[addr-gofunc:])
		return true
	}
}

func TestSymbolizeSynthetic(t *testing.T) {
	tab, tree := synth()
	tb, err := Parse(tab, le, 0, gofunc, reader(tree))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pc   uint64
		want []Frame
	}{
		{0x401004, []Frame{{"main.f", "a.go", 10}}},
		{0x401014, []Frame{{"main.inl", "a.go", 12}, {"main.f", "a.go", 10}}},
		{0x401025, []Frame{{"main.g", "b.go", 29}}},
		{0x401040, nil},
		{0x400fff, nil},
	} {
		got, ok := tb.Symbolize(c.pc, nil)
		if ok != (c.want != nil) || len(got) != len(c.want) {
			t.Errorf("%#x: %v %v, want %v", c.pc, got, ok, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%#x frame %d: %v, want %v", c.pc, i, got[i], c.want[i])
			}
		}
	}
	// Without the inline tree the inlined code folds into its caller.
	tb2, _ := Parse(tab, le, 0, 0, nil)
	if got, _ := tb2.Symbolize(0x401014, nil); len(got) != 1 || got[0].Function != "main.f" || got[0].Line != 12 {
		t.Errorf("without inline tree: %v", got)
	}
	// FindGoFunc finds moduledata by its pclntab pointer and text field.
	md := make([]byte, 8*48)
	le.PutUint64(md[8*3:], 0x4d0000)
	le.PutUint64(md[8*3+8*22:], 0x401000)
	le.PutUint64(md[8*3+8*40:], gofunc)
	if g, ok := tb.FindGoFunc(0x4d0000, md); !ok || g != gofunc {
		t.Errorf("FindGoFunc = %#x %v, want %#x", g, ok, gofunc)
	}
}

func TestParseRejects(t *testing.T) {
	tab, _ := synth()
	if _, err := Parse(tab[:7], le, 0, 0, nil); err == nil {
		t.Error("truncated header accepted")
	}
	bad := append([]byte{}, tab...)
	bad[0] = 0xfb // Go 1.2 tables are not read
	if _, err := Parse(bad, le, 0, 0, nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("old magic: %v, want ErrUnsupported", err)
	}
	short := tab[:le.Uint64(tab[8+7*8:])+10] // cut inside the entry/offset pairs
	if _, err := Parse(short, le, 0, 0, nil); err == nil {
		t.Error("truncated function table accepted")
	}
}

func FuzzSymbolize(f *testing.F) {
	tab, tree := synth()
	f.Add(tab, tree, uint64(0x401014))
	f.Add(tab, tree, uint64(0x401025))
	f.Fuzz(func(t *testing.T, tab, tree []byte, pc uint64) {
		tb, err := Parse(tab, le, 0, gofunc, reader(tree))
		if err != nil {
			return
		}
		frames, _ := tb.Symbolize(pc, nil)
		if len(frames) > maxDepth+1 {
			t.Fatalf("%d frames", len(frames))
		}
		tb.FindGoFunc(0x4d0000, tab)
	})
}
