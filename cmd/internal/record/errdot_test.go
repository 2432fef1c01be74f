package record

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/platform"
)

// TestCommandInCurrentDir records a command named bare that exec finds
// only in the current directory (exec.ErrDot: Windows looks there first,
// here PATH is "."): record must say to write it as a path, before
// anything is started.
func TestCommandInCurrentDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("PATH", ".")
	err := Main([]string{"-o", filepath.Join(dir, "t.rawstack"), "--", "prog"}, io.Discard, io.Discard,
		func(platform.Backend) bool { return true }, nil)
	var ue *UsageError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v, want a usage error", err)
	}
	if want := "write ." + string(filepath.Separator) + "prog"; !strings.Contains(err.Error(), want) {
		t.Errorf("%q does not say %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "t.rawstack")); err == nil {
		t.Errorf("a trace file was created")
	}
}
