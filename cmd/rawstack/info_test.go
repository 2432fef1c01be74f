package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden files")

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test -update):\n%s", path, got)
	}
}

func TestInfo(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"info", "../../format/testdata/every_kind.rawstack"}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	checkGolden(t, "info_every_kind", out.Bytes())
}

// TestInfoDamaged: a flipped byte inside the stream's only chunk is
// reported with its offset, and info still succeeds.
func TestInfoDamaged(t *testing.T) {
	data, err := os.ReadFile("../../format/testdata/every_kind.rawstack")
	if err != nil {
		t.Fatal(err)
	}
	data[100] ^= 0xff
	path := filepath.Join(t.TempDir(), "damaged.rawstack")
	os.WriteFile(path, data, 0o644)
	var out, errb bytes.Buffer
	if rc := run([]string{"info", path}, &out, &errb); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errb.String())
	}
	if !strings.Contains(out.String(), "chunks:    0 read, 1 skipped") || !strings.Contains(out.String(), "chunk at offset 20: CRC32C mismatch") {
		t.Fatalf("damage not reported:\n%s", out.String())
	}
}

func TestInfoNotATrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x")
	os.WriteFile(path, []byte("hello, this is not a trace file"), 0o644)
	var out, errb bytes.Buffer
	if rc := run([]string{"info", path}, &out, &errb); rc != 1 || !strings.Contains(errb.String(), "bad magic") || !strings.Contains(errb.String(), path) {
		t.Fatalf("rc %d, stderr %q", rc, errb.String())
	}
}

// countKinds reads the stream at path and counts its events per kind; any
// damage fails the test.
func countKinds(t *testing.T, path string) map[format.Kind]int {
	t.Helper()
	r, err := format.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	kinds := map[format.Kind]int{}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return kinds
		}
		if err != nil {
			t.Fatal(err)
		}
		kinds[ev.Kind]++
	}
}
