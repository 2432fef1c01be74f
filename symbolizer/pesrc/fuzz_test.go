package pesrc

import (
	"bytes"
	debugpe "debug/pe"
	"encoding/binary"
	"os"
	"strings"
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

// TestDamagedDWARF: an image whose .debug_info claims more bytes than the
// file holds loses its DWARF only; the COFF symbols still name code, and
// the error names the file and offset.
func TestDamagedDWARF(t *testing.T) {
	b, err := os.ReadFile("testdata/tiny-dwarf.exe")
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewFile(bytes.NewReader(b), "tiny.exe", int64(len(b)), &Options{NoPDB: true})
	if err != nil {
		t.Fatal(err)
	}
	var info *debugpe.Section
	for _, s := range src.img.PE.Sections {
		if s.Name == ".debug_info" {
			info = s
		}
	}
	if info == nil || !src.HasDWARF() {
		t.Fatal("tiny-dwarf.exe should have .debug_info (under a long section name)")
	}
	src.Close()
	// Section header: VirtualSize at +8, SizeOfRawData at +16; make both huge.
	hdr := sectionHeader(t, b, info)
	binary.LittleEndian.PutUint32(b[hdr+8:], 0x7fff0000)
	binary.LittleEndian.PutUint32(b[hdr+16:], 0x7fff0000)
	src, err = NewFile(bytes.NewReader(b), "tiny.exe", int64(len(b)), &Options{NoPDB: true})
	if err != nil {
		t.Fatalf("a damaged DWARF section lost the whole image: %v", err)
	}
	defer src.Close()
	if src.HasDWARF() || src.DWARFError() == nil || !strings.Contains(src.DWARFError().Error(), "tiny.exe") {
		t.Fatalf("HasDWARF %v, DWARFError %v; want the error naming the file", src.HasDWARF(), src.DWARFError())
	}
	fr, _ := src.Symbolize(0x1000, nil)
	if len(fr) == 0 || fr[0].Function == "" {
		t.Errorf("the COFF symbols should still name rva 0x1000, got %v", fr)
	}
	t.Logf("%v", src.DWARFError())
}

// sectionHeader returns the file offset of s's 40-byte section header,
// found by its VirtualSize, VirtualAddress, SizeOfRawData and
// PointerToRawData after the 8 name bytes.
func sectionHeader(t *testing.T, b []byte, s *debugpe.Section) int {
	t.Helper()
	var key [16]byte
	binary.LittleEndian.PutUint32(key[0:], s.VirtualSize)
	binary.LittleEndian.PutUint32(key[4:], s.VirtualAddress)
	binary.LittleEndian.PutUint32(key[8:], s.Size)
	binary.LittleEndian.PutUint32(key[12:], s.Offset)
	if bytes.Count(b, key[:]) != 1 {
		t.Fatalf("section header of %s not found once", s.Name)
	}
	return bytes.Index(b, key[:]) - 8
}
