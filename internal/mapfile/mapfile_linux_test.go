package mapfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestGuardTruncated truncates a mapped file and reads past its new end:
// Guard returns ErrFault where the read would otherwise kill the process
// with SIGBUS.
func TestGuardTruncated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 3*4096), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	var sink byte
	err = Guard(func() error {
		sink = m.Data()[2*4096+1]
		return nil
	})
	if !errors.Is(err, ErrFault) {
		t.Fatalf("read past a truncated mapping: %v (byte %d), want ErrFault", err, sink)
	}
	// Other panics pass through.
	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recovered %v, want boom", r)
		}
	}()
	Guard(func() error { panic("boom") })
}
