package pdb

import (
	"testing"

	"github.com/rawstack/rawstack/symbolizer"
)

// TestOMAP checks the OMAP translation (image RVA → the symbols' RVA) on a
// hand-made table, and that Symbolize goes through it: the linker that
// writes OMAP (a post-link optimizer reordering code) is not available
// here.
func TestOMAP(t *testing.T) {
	f := &File{omapToSrc: []omapEntry{{0x1000, 0x5000}, {0x1100, 0}, {0x1200, 0x4000}}}
	for _, tc := range []struct {
		in, out uint32
		ok      bool
	}{
		{0x0FFF, 0, false}, // before the table
		{0x1000, 0x5000, true},
		{0x10FF, 0x50FF, true},
		{0x1100, 0, false}, // mapped to nothing: code the optimizer dropped
		{0x1234, 0x4034, true},
	} {
		out, ok := f.imageToSymRVA(tc.in)
		if out != tc.out || ok != tc.ok {
			t.Errorf("imageToSymRVA(%#x) = %#x, %v; want %#x, %v", tc.in, out, ok, tc.out, tc.ok)
		}
	}

	// Through Symbolize: the tiny seed's code at 0x1000.. moved to 0x8000
	// in the "optimized" image.
	fx, err := Open("testdata/tiny.pdb")
	if err != nil {
		t.Fatal(err)
	}
	defer fx.Close()
	want, err := fx.Symbolize(0x1004, nil)
	if err != nil || len(want) == 0 {
		t.Fatalf("seed at 0x1004: %v, %v", want, err)
	}
	fx.omapToSrc = []omapEntry{{0x8000, 0x1000}, {0x9000, 0}}
	got, err := fx.Symbolize(0x8004, nil)
	if err != nil || len(got) != len(want) || got[len(got)-1] != want[len(want)-1] {
		t.Errorf("through OMAP: %v, %v; want %v", got, err, want)
	}
	if fr, _ := fx.Symbolize(0x1004, []symbolizer.Frame{}); len(fr) != 0 {
		t.Errorf("an unmapped image RVA symbolized to %v", fr)
	}
}
