package idcache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStoreAndHas(t *testing.T) {
	dir := t.TempDir()
	id := []byte{0xab, 0xcd, 0xef, 0x01}
	if Has(dir, id, false) {
		t.Fatal("empty cache has the file")
	}
	n, err := Store(dir, id, false, strings.NewReader("binary"), 0)
	if err != nil || n != 6 {
		t.Fatalf("Store: %d, %v", n, err)
	}
	if p := Path(dir, id, false); p != filepath.Join(dir, ".build-id", "ab", "cdef01") {
		t.Errorf("path %s", p)
	}
	if b, err := os.ReadFile(Path(dir, id, false)); err != nil || string(b) != "binary" {
		t.Errorf("stored %q, %v", b, err)
	}
	// Stored again: present, nothing written.
	if n, err := Store(dir, id, false, strings.NewReader("other"), 0); n != 0 || err != nil {
		t.Errorf("second Store: %d, %v", n, err)
	}
	if _, err := Store(dir, id, true, strings.NewReader("debug"), 0); err != nil {
		t.Fatal(err)
	}
	if !Has(dir, id, true) || !strings.HasSuffix(Path(dir, id, true), "cdef01.debug") {
		t.Error("debug file not kept beside the binary's")
	}
	if _, err := Store(dir, []byte{1}, false, strings.NewReader("x"), 0); err == nil {
		t.Error("a one-byte build id names no file")
	}
}

// TestStoreTooLarge: a file over the cap is not stored, and nothing is
// left behind under a temporary name.
func TestStoreTooLarge(t *testing.T) {
	dir := t.TempDir()
	id := []byte{1, 2, 3}
	_, err := Store(dir, id, false, bytes.NewReader(make([]byte, 100)), 10)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
	if Has(dir, id, false) || Usage(dir) != 0 {
		t.Errorf("a file too large left %d bytes", Usage(dir))
	}
}

// TestStoreFailedRead: a source that fails midway leaves no file under
// the build id's name (a reader never sees part of one).
func TestStoreFailedRead(t *testing.T) {
	dir := t.TempDir()
	id := []byte{1, 2, 3}
	if _, err := Store(dir, id, false, &failing{n: 1000}, 0); err == nil {
		t.Fatal("no error from a failing source")
	}
	if Has(dir, id, false) || Usage(dir) != 0 {
		t.Errorf("a failed copy left %d bytes", Usage(dir))
	}
}

type failing struct{ n int }

func (f *failing) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("source gone")
	}
	n := min(len(p), f.n)
	f.n -= n
	return n, nil
}

// TestPrune keeps the cache under its cap, the least recently stored or
// touched files first out, and a touch (Has) keeps a file.
func TestPrune(t *testing.T) {
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	for i := byte(0); i < 10; i++ {
		id := []byte{i, i, i}
		if _, err := Store(dir, id, false, bytes.NewReader(make([]byte, 1000)), 0); err != nil {
			t.Fatal(err)
		}
		at := base.Add(time.Duration(i) * time.Minute)
		os.Chtimes(Path(dir, id, false), at, at)
	}
	// File 0 is the oldest stored, but used since.
	if !Has(dir, []byte{0, 0, 0}, false) {
		t.Fatal("file 0 missing")
	}
	if left := Prune(dir, 4500); left > 4500 {
		t.Fatalf("%d bytes left, cap 4500", left)
	}
	for i := byte(0); i < 10; i++ {
		want := i == 0 || i >= 7 // the touched one and the three newest
		if got := Has(dir, []byte{i, i, i}, false); got != want {
			t.Errorf("file %d kept %v, want %v", i, got, want)
		}
	}
}
