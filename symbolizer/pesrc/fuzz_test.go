package pesrc

import (
	"bytes"
	"os"
	"testing"
)

// maxFuzzImage caps the images the fuzzer builds: DWARF and pclntab
// readers decompress and scan, and a bigger input only makes each run
// slower.
const maxFuzzImage = 256 << 10

// FuzzOpen feeds damaged PE images to the whole PE path: headers, long
// section names, the COFF symbol table and its sizes, exports, the DWARF
// sections handed to the DWARF reader, the pclntab scan, and symbolizes
// addresses spread over every section. Nothing may panic, hang or
// allocate what the file does not hold.
func FuzzOpen(f *testing.F) {
	for _, p := range []string{"testdata/tiny-dwarf.exe", "../pe/testdata/tiny.dll"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > maxFuzzImage {
			return
		}
		src, err := NewFile(bytes.NewReader(b), "fuzz.exe", int64(len(b)), &Options{NoPDB: true})
		if err != nil {
			return
		}
		defer src.Close()
		// At most 64 addresses per section, the first and spread.
		for _, s := range src.img.PE.Sections {
			step := max(uint64(s.VirtualSize)/64, 1)
			for off := uint64(0); off < uint64(s.VirtualSize) && off < 64*step; off += step {
				src.Symbolize(uint64(s.VirtualAddress)+off, nil)
			}
		}
	})
}
