//go:build linux

package tracking

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestModuleIDsGoneProcess: a module met after its process is gone, at a
// path the host does not have (a container that lived milliseconds), has
// no build id to read; the next process mapping the same file (same
// device and inode) must still get its build id. Remembering the failed
// read left every later process of that build without one: unnamed and
// never copied into the build-id cache (TestContainerChurn, issue 36).
func TestModuleIDsGoneProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	want, err := readBuildIDs(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	s := &Tracker{ids: map[idKey]elfIDs{}}
	path := filepath.Join(t.TempDir(), "app")
	const gone = 1<<22 + 1 // above pid_max's default: no such process
	const dev, ino = 0x803, 12345
	if ids, ok := s.moduleIDs(gone, path, dev, ino); ok || ids.GoBuildID != "" {
		t.Fatalf("no file anywhere: got %+v, %v", ids, ok)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	// The host path now resolves, as a live process's root would.
	ids, ok := s.moduleIDs(gone, path, dev, ino)
	if !ok || ids.GoBuildID != want.GoBuildID || !bytes.Equal(ids.BuildID, want.BuildID) {
		t.Fatalf("after the file appeared: got %+v, %v; want %+v", ids, ok, want)
	}
	// A file that exists but is not ELF is remembered as such.
	var st syscall.Stat_t
	script := filepath.Join(t.TempDir(), "script")
	os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755)
	syscall.Stat(script, &st)
	if _, ok := s.moduleIDs(gone, script, st.Dev, st.Ino); ok {
		t.Fatal("a shell script read as ELF")
	}
	if _, found := s.ids[idKey{script, st.Dev, st.Ino}]; !found {
		t.Error("a file read and found not ELF is read again at every mapping")
	}
}
