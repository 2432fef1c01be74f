package pe

import (
	"bytes"
	"os"
	"testing"
)

// FuzzNewFile feeds mutated images to every reader of this package. The
// seed is testdata/tiny.dll (1.5 KB: exports, a forwarder, .pdata, an RSDS
// record), built by lld-link.
func FuzzNewFile(f *testing.F) {
	seed, err := os.ReadFile("testdata/tiny.dll")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		pf, err := NewFile(bytes.NewReader(b), "fuzz.dll", int64(len(b)))
		if err != nil {
			return
		}
		pf.CodeView()
		pf.Exports()
		pf.ExceptionData()
		var p [16]byte
		pf.ReadRVA(0x1000, p[:])
	})
}

// TestTinySeed checks the committed seed still parses: a fuzz corpus that
// is rejected at once explores nothing.
func TestTinySeed(t *testing.T) {
	pf, err := Open("testdata/tiny.dll")
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	cv, err := pf.CodeView()
	if err != nil || cv.PDBName() != "tiny.pdb" || cv.Age != 1 {
		t.Fatalf("CodeView %+v, %v", cv, err)
	}
	exps, err := pf.Exports()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range exps {
		names[e.Name] = true
	}
	for _, n := range []string{"add", "mul", "counter", "fwd"} {
		if !names[n] {
			t.Errorf("export %q missing from %+v", n, exps)
		}
	}
}
