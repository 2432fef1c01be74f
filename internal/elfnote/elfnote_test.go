package elfnote

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// note encodes one note with 4-byte alignment.
func note(name string, typ uint32, desc []byte) []byte {
	var b []byte
	n := []byte(name + "\x00")
	b = binary.LittleEndian.AppendUint32(b, uint32(len(n)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
	b = binary.LittleEndian.AppendUint32(b, typ)
	b = append(b, n...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func TestGNUBuildID(t *testing.T) {
	id := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	block := append(note("Go", TypeGoBuildID, []byte("abc/def")), note("GNU", TypeGNUBuildID, id)...)
	if got := GNUBuildID(block, binary.LittleEndian, 4); !bytes.Equal(got, id) {
		t.Fatalf("got %x, want %x", got, id)
	}
	// Truncated inside the second note's descriptor: the first note is
	// still read and the bad offset reported.
	bad := block[:len(block)-3]
	var names []string
	if off := ForEach(bad, binary.LittleEndian, 4, func(name string, _ uint32, _ []byte, _ int) bool {
		names = append(names, name)
		return true
	}); off != len(note("Go", TypeGoBuildID, []byte("abc/def"))) || strings.Join(names, ",") != "Go" {
		t.Fatalf("offset %d, names %v", off, names)
	}
}

// TestAgainstReadelf checks the build id of a real binary against
// readelf's --notes output.
func TestAgainstReadelf(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Skipf("test binary is not ELF: %v", err)
	}
	defer f.Close()
	if _, err := exec.LookPath("readelf"); err != nil {
		t.Skip("readelf not installed (binutils)")
	}
	out, err := exec.Command("readelf", "--notes", exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "Build ID: "); i >= 0 {
			want = strings.TrimSpace(line[i+len("Build ID: "):])
		}
	}
	var got []byte
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOTE {
			d, _ := s.Data()
			if id := GNUBuildID(d, f.ByteOrder, s.Addralign); id != nil {
				got = id
			}
		}
	}
	if want == "" {
		if got != nil {
			t.Fatalf("readelf sees no GNU build id, we read %x", got)
		}
		t.Skip("test binary has no GNU build id (go test links without one)")
	}
	if g := hex.EncodeToString(got); g != want {
		t.Fatalf("build id %s, readelf says %s", g, want)
	}
}

func FuzzForEach(f *testing.F) {
	f.Add(note("GNU", TypeGNUBuildID, []byte{1, 2, 3, 4}), uint64(4))
	f.Add(append(note("Go", TypeGoBuildID, []byte("x/y")), 0, 0, 0, 0, 1, 0, 0, 0), uint64(8))
	f.Fuzz(func(t *testing.T, b []byte, align uint64) {
		n := 0
		off := ForEach(b, binary.LittleEndian, align, func(name string, typ uint32, desc []byte, off int) bool {
			n++
			if off < 0 || off+12 > len(b) || len(desc) > len(b) {
				t.Fatalf("note at %d with %d-byte descriptor in %d bytes", off, len(desc), len(b))
			}
			return true
		})
		if off >= len(b) || off < -1 || n > len(b)/12+1 {
			t.Fatalf("returned %d after %d notes of %d bytes", off, n, len(b))
		}
	})
}
