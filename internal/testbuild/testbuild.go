// Package testbuild builds test fixtures from sources under testdata/ and
// caches the results, so every package's tests share one way of turning a
// C, C++, Rust, Go or mingw source into a binary.
//
// A build is a command line plus the files whose contents decide its result.
// The cache key is a hash of the tool's path, size and modification time,
// the arguments, the extra environment and every input's contents; the
// outputs live under [CacheRoot] ($RAWSTACK_FIXTURE_CACHE, else the user
// cache directory: $XDG_CACHE_HOME, else ~/.cache) in
// rawstack-fixtures/KEY/. A build writes into a fresh directory and renames
// it into place, so test binaries of several packages running at once never
// see half-written fixtures.
//
//	exe := testbuild.Build(t, testbuild.Cmd{
//		Tool:   "cc",
//		Args:   []string{"-O2", "-g", "-o", "{dir}/chain", "{in0}"},
//		Inputs: []string{"testdata/chain.c"},
//		Out:    "chain",
//	})
//
// A test whose tool is not installed is skipped with the tool's name, or
// under CI=true fails with it: every prerequisite a test lacks goes through
// [Skip], every probe's answer through [Feature], and what cannot exist on
// the test machines at all is listed, with reasons, in one table read by
// [Impossible].
package testbuild

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Cmd describes one fixture build.
type Cmd struct {
	// Tool is the program to run, looked up on PATH ("cc", "clang",
	// "rustc", "go", "x86_64-w64-mingw32-gcc", ...).
	Tool string
	// Args are the tool's arguments. "{dir}" is replaced by the output
	// directory and "{inN}" by the absolute path of Inputs[N].
	Args []string
	// Inputs are files or directories (relative to the test's working
	// directory, normally the package) whose contents key the cache.
	Inputs []string
	// Out is the name, inside the output directory, of the file Build
	// returns. Other files the command writes there are kept beside it.
	Out string
	// Env is added to the environment of the command and to the key.
	Env []string
	// Dir is the command's working directory; empty means the output
	// directory.
	Dir string
	// Key adds anything else that decides the result (a tool version).
	Key string
}

// Build runs c once per distinct key and returns the path of c.Out. It
// skips the test (fails it under CI=true, see [Skip]) when c.Tool is not
// installed and fails it when the command fails, printing the command and
// its output.
//
// In the arm64 VM it returns the fixture built for it on the host, and on
// the host it builds that too when asked (see RAWSTACK_CROSS_FIXTURES in
// cross.go).
func Build(t testing.TB, c Cmd) string {
	t.Helper()
	if p, ok := prebuilt(t, c); ok {
		return p
	}
	path, err := exec.LookPath(c.Tool)
	if err != nil {
		Skip(t, "%s not installed: cannot build fixture %s", c.Tool, c.Out)
	}
	out, err := build(path, c)
	if err != nil {
		t.Fatal(err)
	}
	crossBuild(t, c)
	return out
}

// Need returns the path of tool, or skips the test (fails it under
// CI=true, see [Skip]) saying why it needs it.
func Need(t testing.TB, tool, why string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		Skip(t, "%s not installed: %s", tool, why)
	}
	return p
}

// NeedAll is [Need] for several tools that serve one purpose.
func NeedAll(t testing.TB, why string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		Need(t, tool, why)
	}
}

// CC compiles the C or C++ sources srcs (paths relative to the test's
// directory, e.g. "testdata/deep.c") with the compiler cc into a binary
// named out, the flags after the sources (so libraries link), cached like
// any [Build]; it returns the binary's path. An empty out names the binary
// after the first source, without its extension. A missing cc goes
// through [Skip].
func CC(t testing.TB, cc, out string, srcs []string, flags ...string) string {
	t.Helper()
	if out == "" && len(srcs) > 0 {
		out = strings.TrimSuffix(filepath.Base(srcs[0]), filepath.Ext(srcs[0]))
	}
	args := []string{"-o", "{dir}/" + out}
	for i := range srcs {
		args = append(args, "{in"+strconv.Itoa(i)+"}")
	}
	return Build(t, Cmd{Tool: cc, Args: append(args, flags...), Inputs: srcs, Out: out})
}

// CacheDir returns the directory fixtures are cached in, creating it.
func CacheDir() (string, error) {
	dir := filepath.Join(CacheRoot(), "rawstack-fixtures")
	return dir, os.MkdirAll(dir, 0o755)
}

func build(tool string, c Cmd) (string, error) {
	if c.Out == "" {
		return "", fmt.Errorf("testbuild: %s build names no output", c.Tool)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", tool)
	if st, err := os.Stat(tool); err == nil {
		fmt.Fprintf(h, "%d %d\x00", st.Size(), st.ModTime().UnixNano())
	}
	for _, a := range c.Args {
		fmt.Fprintf(h, "a%s\x00", a)
	}
	for _, e := range c.Env {
		fmt.Fprintf(h, "e%s\x00", e)
	}
	fmt.Fprintf(h, "k%s\x00o%s\x00", c.Key, c.Out)
	abs := make([]string, len(c.Inputs))
	for i, in := range c.Inputs {
		p, err := filepath.Abs(in)
		if err != nil {
			return "", err
		}
		abs[i] = p
		if err := hashTree(h, p); err != nil {
			return "", fmt.Errorf("testbuild: input %s: %w", in, err)
		}
	}
	root, err := CacheDir()
	if err != nil {
		return "", err
	}
	key := hex.EncodeToString(h.Sum(nil))[:20]
	final := filepath.Join(root, key)
	if _, err := os.Stat(filepath.Join(final, c.Out)); err == nil {
		return filepath.Join(final, c.Out), nil
	}
	tmp, err := os.MkdirTemp(root, key+".tmp")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = expand(a, tmp, abs)
	}
	cmd := exec.Command(tool, args...)
	cmd.Dir = tmp
	if c.Dir != "" {
		cmd.Dir = c.Dir
	}
	cmd.Env = append(os.Environ(), c.Env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testbuild: %s %s: %v\n%s", c.Tool, strings.Join(args, " "), err, b)
	}
	if _, err := os.Stat(filepath.Join(tmp, c.Out)); err != nil {
		return "", fmt.Errorf("testbuild: %s %s wrote no %s", c.Tool, strings.Join(args, " "), c.Out)
	}
	// Outputs may embed the temporary directory's path (debug info, a
	// PDB path in a PE image); that is harmless for fixtures. Another
	// process may have finished the same build first: keep its result.
	if err := os.Rename(tmp, final); err != nil {
		if _, err2 := os.Stat(filepath.Join(final, c.Out)); err2 != nil {
			return "", fmt.Errorf("testbuild: %w", err)
		}
	}
	return filepath.Join(final, c.Out), nil
}

func expand(a, dir string, inputs []string) string {
	if !strings.Contains(a, "{") {
		return a
	}
	a = strings.ReplaceAll(a, "{dir}", dir)
	for i := len(inputs) - 1; i >= 0; i-- {
		a = strings.ReplaceAll(a, "{in"+strconv.Itoa(i)+"}", inputs[i])
	}
	return a
}

// hashTree hashes a file, or every regular file below a directory in a
// fixed order, with their relative names.
func hashTree(h interface{ Write([]byte) (int, error) }, root string) error {
	st, err := os.Stat(root)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		b, err := os.ReadFile(root)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "f%d\x00", len(b))
		h.Write(b)
		return nil
	}
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "n%s\x00f%d\x00", rel, len(b))
		h.Write(b)
	}
	return nil
}
