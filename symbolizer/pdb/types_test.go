package pdb

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestTypeIndex checks that records found through the hash stream's
// offset index are the ones a scan from the first record finds, for every
// type and id record of the fixtures.
func TestTypeIndex(t *testing.T) {
	for _, kind := range append(fixtureKinds, "many-types") {
		var fx *fixture
		if kind == "many-types" {
			fx = buildManyTypes(t)
		} else {
			fx = buildFixture(t, kind)
		}
		for _, stream := range []int{streamTPI, streamIPI} {
			f, err := Open(fx.pdb)
			if err != nil {
				t.Fatal(err)
			}
			ts, err := f.types(stream)
			if err != nil {
				t.Fatal(err)
			}
			if len(ts.index) == 0 || kind == "many-types" && len(ts.index) < 2 {
				t.Errorf("%s stream %d: no usable offset index", kind, stream)
			}
			scan := &typeStream{sr: ts.sr, first: ts.first, end: ts.end, recStart: ts.recStart, recEnd: ts.recEnd, cache: map[uint32][]byte{}}
			n := 0
			for ti := ts.first; ti < ts.end; ti++ {
				k1, d1, ok1 := ts.record(ti)
				k2, d2, ok2 := scan.record(ti)
				if !ok1 || !ok2 || k1 != k2 || !bytes.Equal(d1, d2) {
					t.Fatalf("%s stream %d type %#x: indexed %v %#x, scanned %v %#x", kind, stream, ti, ok1, k1, ok2, k2)
				}
				n++
			}
			if _, _, ok := ts.record(ts.end); ok {
				t.Errorf("record past the end found")
			}
			t.Logf("%s stream %d: %d records, %d index entries", kind, stream, n, len(ts.index))
			f.Close()
		}
	}
}

// buildManyTypes generates and builds a program with a few hundred
// structures and member functions, so that the type streams are large
// enough (tens of kilobytes) for the linker to write several index
// entries.
func buildManyTypes(t *testing.T) *fixture {
	testbuild.NeedAll(t, "cannot build or check PDB fixtures", "clang", "lld-link")
	var b strings.Builder
	// The runtime pieces a CRT-less -O0 build needs.
	b.WriteString("extern \"C\" { int _fltused; void __chkstk() {}\n")
	b.WriteString("void *memset(void *p, int c, unsigned long long n) { char *q = (char *)p; while (n--) *q++ = (char)c; return p; } }\n")
	for i := 0; i < 400; i++ {
		fmt.Fprintf(&b, "struct S%d { int a%d; double b%d; char c%d[%d]; int get() const { return a%d + (int)b%d; } };\n", i, i, i, i, i+1, i, i)
	}
	b.WriteString("int main() { int s = 0;\n")
	for i := 0; i < 400; i++ {
		fmt.Fprintf(&b, "{ S%d x{}; s += x.get(); }\n", i)
	}
	b.WriteString("return s; }\n")
	sum := sha256.Sum256([]byte(b.String()))
	cache := testbuild.CacheRoot()
	dir := filepath.Join(cache, "rawstack-test", "pdb", "many-"+hex.EncodeToString(sum[:8]))
	fx := &fixture{name: "many-types", exe: filepath.Join(dir, "many.exe"), pdb: filepath.Join(dir, "many.pdb")}
	if _, err := os.Stat(filepath.Join(dir, "ok")); err == nil {
		return fx
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "many.cpp")
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"clang", "--target=x86_64-pc-windows-msvc", "-O0", "-g", "-gcodeview", "-c", src, "-o", "many.obj"},
		{"lld-link", "/debug", "/nodefaultlib", "/entry:main", "/subsystem:console", "many.obj", "/out:many.exe", "/pdb:many.pdb"},
	} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ok"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return fx
}
