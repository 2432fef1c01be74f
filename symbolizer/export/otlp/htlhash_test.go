package otlp_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
)

// shellHTLHash computes the htlhash with coreutils, from the spec's
// words: head -c 4096, tail -c 4096, the length as 8 big-endian bytes,
// sha256sum, the first 32 hex digits.
func shellHTLHash(t *testing.T, path string) string {
	t.Helper()
	testbuild.NeedAll(t, "the oracle needs it (coreutils, xxd)", "head", "tail", "xxd", "sha256sum", "stat")
	out, err := exec.Command("bash", "-c", `f="$1"; n=$(stat -L -c %s "$f"); { head -c 4096 "$f"; tail -c 4096 "$f"; printf '%016x' "$n" | xxd -r -p; } | sha256sum | cut -c1-32`, "-", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestHTLHashMatchesShell holds HTLHash to a shell pipeline over files
// of every size class the definition distinguishes: empty, shorter than a
// page (the two ends are the whole file), between one and two pages (the
// ends overlap), longer, and a real binary.
func TestHTLHashMatchesShell(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, n := range []int{0, 1, 100, 4095, 4096, 4097, 6000, 8192, 8193, 100000} {
		b := make([]byte, n)
		rand.Read(b)
		p := filepath.Join(dir, "f"+string(rune('a'+len(files))))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	if sh, err := exec.LookPath("sh"); err == nil {
		files = append(files, sh)
	}
	for _, p := range files {
		got, err := otlp.HTLHashFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := shellHTLHash(t, p); got != want {
			st, _ := os.Stat(p)
			t.Errorf("%s (%d bytes): htlhash %s, the shell says %s", p, st.Size(), got, want)
		}
	}
	if _, err := otlp.HTLHashFile(dir); err == nil {
		t.Error("a directory was hashed")
	}
}

// TestConvertEmitsHTLHash: the chain fixture's mapping carries the
// htlhash of the binary, and none with NoFileHash.
func TestConvertEmitsHTLHash(t *testing.T) {
	data, bin := chainTrace(t)
	want := shellHTLHash(t, bin)
	for _, noHash := range []bool{false, true} {
		r, err := format.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		p, _, err := otlp.Convert(r, otlp.Options{Raw: true, NoFileHash: noHash}, nil)
		if err != nil {
			t.Fatal(err)
		}
		conform(t, p)
		d := p.Dictionary()
		found := ""
		hashed := 0
		for _, m := range d.MappingTable().All() {
			for _, ai := range m.AttributeIndices().All() {
				a := d.AttributeTable().At(int(ai))
				if d.StringTable().At(int(a.KeyStrindex())) != otlp.AttrBuildIDHTLHash {
					continue
				}
				hashed++
				if filepath.Base(d.StringTable().At(int(m.FilenameStrindex()))) == "chain" {
					found = a.Value().Str()
				}
			}
		}
		switch {
		case noHash && hashed != 0:
			t.Errorf("NoFileHash: %d mappings hashed", hashed)
		case !noHash && found != want:
			t.Errorf("chain's htlhash %q, want %s (%d mappings hashed)", found, want, hashed)
		case !noHash:
			t.Logf("%d of %d mappings carry an htlhash", hashed, d.MappingTable().Len()-1)
		}
	}
}
