package tracer

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildC compiles testdata sources with cc and the given flags into a
// binary cached (by a hash of sources and flags) under the user cache dir,
// and returns its path. The test skips when no C compiler is installed.
func buildC(t testing.TB, out string, srcs []string, flags ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build fixtures")
	}
	h := sha256.New()
	for _, s := range srcs {
		b, err := os.ReadFile(filepath.Join("testdata", s))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
		h.Write([]byte{0})
	}
	h.Write([]byte(strings.Join(flags, "\x00")))
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "rawstack-fixtures", hex.EncodeToString(h.Sum(nil))[:16])
	bin := filepath.Join(dir, out)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"-o", bin + ".tmp"}
	for _, s := range srcs {
		args = append(args, filepath.Join("testdata", s))
	}
	args = append(args, flags...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// buildRust compiles testdata/src with rustc -O and frame pointers, cached
// like buildC. The test skips when rustc is not installed. Shrink-wrapping
// is off: LLVM would otherwise set up a function's frame only around its
// calls, so a sample in a loop before them loses the caller.
func buildRust(t testing.TB, out, src string) string {
	t.Helper()
	rustc, err := exec.LookPath("rustc")
	if err != nil {
		t.Skip("no rustc to build the Rust fixture")
	}
	b, err := os.ReadFile(filepath.Join("testdata", src))
	if err != nil {
		t.Fatal(err)
	}
	flags := []string{"-O", "-C", "force-frame-pointers=yes", "-C", "llvm-args=-enable-shrink-wrap=false"}
	sum := sha256.Sum256(append(b, strings.Join(flags, " ")...))
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "rawstack-fixtures", hex.EncodeToString(sum[:])[:16])
	bin := filepath.Join(dir, out)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(rustc, append(flags, "-o", bin+".tmp", filepath.Join("testdata", src))...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("rustc: %v\n%s", err, b)
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}
