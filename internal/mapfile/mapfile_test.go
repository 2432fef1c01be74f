package mapfile

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	want := bytes.Repeat([]byte("rawstack"), 3000)
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !bytes.Equal(m.Data(), want) {
		t.Fatalf("Data differs from the file")
	}
	b := make([]byte, 10)
	if n, err := m.ReadAt(b, int64(len(want)-4)); n != 4 || err != io.EOF {
		t.Errorf("ReadAt at the end: %d, %v; want 4, EOF", n, err)
	}
	if _, err := m.ReadAt(b, -1); err == nil {
		t.Errorf("ReadAt(-1) succeeded")
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	if e, err := Open(empty); err != nil || len(e.Data()) != 0 {
		t.Errorf("empty file: %v, %d bytes", err, len(e.Data()))
	}
	if _, err := Open(dir); err == nil {
		t.Errorf("Open of a directory succeeded")
	}
	if _, err := Open(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("Open of a missing file: %v", err)
	}
}
