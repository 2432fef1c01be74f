package testbuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Python returns a CPython interpreter of version v for a test that
// reads interpreters from outside: "3.12" is pyenv's newest 3.12 (under
// $PYENV_ROOT, `pyenv root` or ~/.pyenv), "debian3.11" Debian's
// /usr/bin/python3.11 (no frame pointers, no DWARF). A missing one goes
// through [Skip]: .ci/run installs them.
func Python(t testing.TB, v string) string {
	t.Helper()
	if minor, ok := strings.CutPrefix(v, "debian"); ok {
		p := "/usr/bin/python" + minor
		if _, err := os.Stat(p); err != nil {
			Skip(t, "Debian's python%s is not installed (apt-get install python%s): %v", minor, minor, err)
		}
		return p
	}
	var roots []string
	roots = append(roots, os.Getenv("PYENV_ROOT"))
	if out, err := exec.Command("pyenv", "root").Output(); err == nil {
		roots = append(roots, strings.TrimSpace(string(out)))
	}
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(home, ".pyenv"))
	}
	for _, root := range roots {
		if root == "" {
			continue
		}
		m, _ := filepath.Glob(filepath.Join(root, "versions", v+".*", "bin", "python"+v))
		if len(m) > 0 {
			sort.Sort(sort.Reverse(sort.StringSlice(m)))
			return m[0]
		}
	}
	Skip(t, "no CPython %s under pyenv ($PYENV_ROOT, `pyenv root`, ~/.pyenv)", v)
	return ""
}
