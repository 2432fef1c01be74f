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

	"github.com/rawstack/rawstack/internal/testbuild"
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

// TestAgainstReadelf checks the build id of real binaries against
// readelf's --notes output: a C fixture linked with a GNU build id, and the
// test binary, which go test links without one (both must then say none).
func TestAgainstReadelf(t *testing.T) {
	testbuild.Need(t, "readelf", "binutils' readelf is the oracle")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	withID := testbuild.CC(t, "cc", "", []string{"testdata/empty.c"}, "-Wl,--build-id=sha1")
	for _, path := range []string{withID, exe} {
		want, got := readelfBuildID(t, path), ourBuildID(t, path)
		if path == withID && want == "" {
			t.Fatalf("%s: readelf sees no GNU build id although it was linked with --build-id", path)
		}
		if g := hex.EncodeToString(got); g != want {
			t.Errorf("%s: build id %q, readelf says %q", path, g, want)
		}
	}
}

func readelfBuildID(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("readelf", "--notes", path).Output()
	if err != nil {
		t.Fatalf("readelf --notes %s: %v", path, err)
	}
	want := ""
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "Build ID: "); i >= 0 {
			want = strings.TrimSpace(line[i+len("Build ID: "):])
		}
	}
	return want
}

func ourBuildID(t *testing.T, path string) []byte {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []byte
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOTE {
			d, _ := s.Data()
			if id := GNUBuildID(d, f.ByteOrder, s.Addralign); id != nil {
				got = id
			}
		}
	}
	return got
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
