package arch

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// buildC compiles testdata/src with compiler cc and flags into a cached
// binary keyed by the source, the compiler and the flags, and returns its
// path. It skips the test if cc is not installed.
func buildC(t testing.TB, cc, src string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("%s not installed: %v", cc, err)
	}
	code, err := os.ReadFile(filepath.Join("testdata", src))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write(code)
	h.Write([]byte(cc + "\x00" + strings.Join(flags, "\x00")))
	key := hex.EncodeToString(h.Sum(nil))[:16]
	dir := filepath.Join(os.TempDir(), "rawstack-arch-fixtures")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, strings.TrimSuffix(src, filepath.Ext(src))+"-"+key)
	if _, err := os.Stat(out); err == nil {
		return out
	}
	tmp := out + ".tmp" + hex.EncodeToString(h.Sum([]byte(t.Name())))[:8]
	args := append(append([]string{}, flags...), "-o", tmp, filepath.Join("testdata", src))
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed: %v", name, err)
	}
	return p
}

// buildGo builds the Go program in testdata/dir for the host into the
// fixture cache, keyed by its source.
func buildGo(t testing.TB, dir string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not installed: %v", err)
	}
	src, err := os.ReadFile(filepath.Join("testdata", dir, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(append(src, runtime.Version()...))
	cache := filepath.Join(os.TempDir(), "rawstack-arch-fixtures")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(cache, dir+"-"+hex.EncodeToString(h[:8]))
	if _, err := os.Stat(out); err == nil {
		return out
	}
	tmp := out + ".tmp"
	cmd := exec.Command(goTool, "build", "-o", tmp, "./"+filepath.Join("testdata", dir))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	return out
}
