package windows

import (
	"errors"
	"os"
	"testing"

	"github.com/rawstack/rawstack/symbolizer/pe"
)

// flat reads an image file as if it were mapped: RVAs through the section
// table, via symbolizer/pe, which is tested against the PE specification's
// layout on its own.
func flat(t testing.TB, path string) func(uint32, []byte) error {
	f, err := pe.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return func(rva uint32, p []byte) error {
		// Headers are not in a section: the loader maps them at RVA 0.
		if rva < 0x1000 {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if int(rva)+len(p) > len(b) {
				return errors.New("past the end")
			}
			copy(p, b[rva:])
			return nil
		}
		return f.ReadRVA(rva, p)
	}
}

// TestReadImageInfo reads the headers of a DLL with a PDB identity and
// compares them with symbolizer/pe's reading of the file.
func TestReadImageInfo(t *testing.T) {
	const path = "../../symbolizer/pe/testdata/tiny.dll"
	ii, err := ReadImageInfo(flat(t, path))
	if err != nil {
		t.Fatal(err)
	}
	f, err := pe.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ii.TimeDateStamp != f.TimeDateStamp || ii.SizeOfImage != f.SizeOfImage || ii.Machine != f.Machine {
		t.Errorf("headers %+v; file: stamp %#x size %#x machine %#x", ii, f.TimeDateStamp, f.SizeOfImage, f.Machine)
	}
	if cv, err := f.CodeView(); err == nil {
		if !ii.HasCodeView || ii.PDBGUID != cv.GUID || ii.PDBAge != cv.Age || ii.PDBPath != cv.Path {
			t.Errorf("CodeView %+v, file has %+v", ii, cv)
		}
	} else if ii.HasCodeView {
		t.Errorf("CodeView found where the file has none: %+v", ii)
	}
	if pd, _ := f.ExceptionData(); uint32(len(pd)) != ii.ExceptionSize {
		t.Errorf("exception directory of %d bytes, file has %d", ii.ExceptionSize, len(pd))
	}
}

// FuzzReadImageInfo reads headers from arbitrary memory (an image in
// another process may be anything): it must fail cleanly and never read
// past the caps.
func FuzzReadImageInfo(f *testing.F) {
	if b, err := os.ReadFile("../../symbolizer/pe/testdata/tiny.dll"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		reads := 0
		ReadImageInfo(func(rva uint32, p []byte) error {
			reads++
			if len(p) > maxCodeView {
				t.Fatalf("read of %d bytes", len(p))
			}
			if uint64(rva)+uint64(len(p)) > uint64(len(b)) {
				return errors.New("unmapped")
			}
			copy(p, b[rva:])
			return nil
		})
		if reads > 3+maxDebugEntries+1 {
			t.Fatalf("%d reads", reads)
		}
	})
}
