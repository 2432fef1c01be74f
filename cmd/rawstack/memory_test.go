package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
)

// TestConvertMemoryValues: convert --value picks the memory figures of a
// trace with Alloc and Free events, for folded stacks and the text
// report, and refuses them on a trace without.
func TestConvertMemoryValues(t *testing.T) {
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{PointerSize: 8, OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteStack(1, []uint64{0x1000, 0x2000})
	w.WriteStack(2, []uint64{0x3000, 0x2000})
	w.WriteAlloc(format.Alloc{Time: 20, Pid: 7, Tid: 7, Stack: 1, Addr: 0xa000, Bytes: 1 << 30, Objects: 1024})
	w.WriteFree(format.Free{Time: 30, Pid: 7, Tid: 7, Addr: 0xa000})
	w.WriteAlloc(format.Alloc{Time: 40, Pid: 7, Tid: 7, Stack: 2, Addr: 0xb000, Bytes: 128 << 20, Objects: 128})
	w.Close()
	trace := filepath.Join(t.TempDir(), "mem.rawstack")
	if err := os.WriteFile(trace, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ to, value, want string }{
		{"folded", "alloc_space", "0x2000;0x1000 1073741824\n0x2000;0x3000 134217728\n"},
		{"folded", "alloc_objects", "0x2000;0x1000 1024\n0x2000;0x3000 128\n"},
		{"folded", "inuse_space", "0x2000;0x3000 134217728\n"},
		{"folded", "inuse_objects", "0x2000;0x3000 128\n"},
		{"text", "inuse_space", "134217728 bytes in use (inuse_space)"},
		{"text", "alloc_space", "1207959552 bytes allocated (alloc_space)"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"convert", trace, "--to", c.to, "--value", c.value, "--no-debuginfod"}, &stdout, &stderr); code != 0 {
			t.Fatalf("convert --to %s --value %s: exit %d: %s", c.to, c.value, code, stderr.String())
		}
		if c.to == "folded" && stdout.String() != c.want || c.to == "text" && !strings.HasPrefix(stdout.String(), c.want) {
			t.Errorf("convert --to %s --value %s:\n%s\nwant %q", c.to, c.value, stdout.String(), c.want)
		}
	}
	if code := run([]string{"convert", trace, "--to", "folded", "--value", "inuse", "--no-debuginfod"}, &bytes.Buffer{}, &bytes.Buffer{}); code == 0 {
		t.Error("convert --value inuse: no error")
	}
}
