package testbuild

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Fixtures for another architecture. A test binary built for arm64 and
// run in the arm64 VM (internal/arm64vm) has no compilers where it runs:
// its fixtures are built on the host with the cross compilers, by the
// same Cmd its test gives [Build], and packed into the VM beside it.
//
//   - On the host, with RAWSTACK_CROSS_FIXTURES=ARCH:DIR, every Build
//     builds its fixture natively as always (the test goes on with it)
//     and builds it for ARCH too, with that architecture's tools, into
//     DIR/KEY/ (a symbolic link to the cached build).
//   - In the VM, with RAWSTACK_PREBUILT_FIXTURES=DIR, Build returns
//     DIR/KEY/Out: the fixture built for the architecture the test binary
//     runs on.
//
// KEY is the same on both sides: a hash of the Cmd as the test wrote it
// (tool, arguments, environment, output) and of its inputs' contents, so
// the VM finds the build of exactly the Cmd and sources it asks for.
const (
	envCross    = "RAWSTACK_CROSS_FIXTURES"
	envPrebuilt = "RAWSTACK_PREBUILT_FIXTURES"
)

// crossTool is how a tool of a Cmd builds for another architecture: the
// program, arguments put before the Cmd's, and environment added.
type crossTool struct {
	tool string
	pre  []string
	env  []string
}

// crossTools maps, per target architecture, the tools whose fixtures can
// be built for it on the host (Debian's cross compilers and Go); a
// fixture of any other tool has no cross build, and a test in the VM
// that asks for one fails (skips outside CI) naming it.
var crossTools = map[string]map[string]crossTool{
	"arm64": {
		"cc":      {tool: "aarch64-linux-gnu-gcc"},
		"gcc":     {tool: "aarch64-linux-gnu-gcc"},
		"c++":     {tool: "aarch64-linux-gnu-g++"},
		"g++":     {tool: "aarch64-linux-gnu-g++"},
		"clang":   {tool: "clang", pre: []string{"--target=aarch64-linux-gnu"}},
		"clang++": {tool: "clang++", pre: []string{"--target=aarch64-linux-gnu"}},
		"go":      {tool: "go", env: []string{"GOOS=linux", "GOARCH=arm64", "CC=aarch64-linux-gnu-gcc"}},
	},
}

// crossKey is the key of c's build for arch, computed alike on the host
// and in the VM: paths are taken relative to the test's directory (its
// package), where the repository's copy in the VM has the same files.
func crossKey(c Cmd, arch string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	rel := func(p string) string {
		if filepath.IsAbs(p) {
			if r, err := filepath.Rel(wd, p); err == nil {
				p = r
			}
		}
		return filepath.ToSlash(filepath.Clean(p))
	}
	h := sha256.New()
	fmt.Fprintf(h, "rawstack-cross-1\x00%s\x00%s\x00", arch, c.Tool)
	for _, a := range c.Args {
		fmt.Fprintf(h, "a%s\x00", a)
	}
	for _, e := range c.Env {
		fmt.Fprintf(h, "e%s\x00", e)
	}
	fmt.Fprintf(h, "k%s\x00o%s\x00d%s\x00", c.Key, c.Out, rel(c.Dir))
	for _, in := range c.Inputs {
		fmt.Fprintf(h, "i%s\x00", rel(in))
		if err := hashTree(h, in); err != nil {
			return "", fmt.Errorf("testbuild: input %s: %w", in, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// prebuilt returns the VM's fixture for c when RAWSTACK_PREBUILT_FIXTURES
// is set; ok is false when it is not.
func prebuilt(t testing.TB, c Cmd) (path string, ok bool) {
	t.Helper()
	dir := os.Getenv(envPrebuilt)
	if dir == "" {
		return "", false
	}
	key, err := crossKey(c, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, key, c.Out)
	if _, err := os.Stat(p); err != nil {
		Skip(t, "fixture %s (%s %s) was not built for %s on the host: its tool has no cross build, or the host run of this test did not reach it",
			c.Out, c.Tool, strings.Join(c.Args, " "), runtime.GOARCH)
	}
	return p, true
}

// crossBuild builds c for the architecture RAWSTACK_CROSS_FIXTURES names,
// when it is set and c's tool has a cross build there.
func crossBuild(t testing.TB, c Cmd) {
	t.Helper()
	spec := os.Getenv(envCross)
	if spec == "" {
		return
	}
	arch, dir, ok := strings.Cut(spec, ":")
	if !ok || dir == "" {
		t.Fatalf("testbuild: %s=%q: want ARCH:DIR", envCross, spec)
	}
	ct, ok := crossTools[arch][c.Tool]
	if !ok {
		t.Logf("testbuild: fixture %s: no %s build of %s fixtures", c.Out, arch, c.Tool)
		return
	}
	key, err := crossKey(c, arch)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, key)
	if _, err := os.Stat(link); err == nil {
		return
	}
	x := c
	x.Tool = ct.tool
	x.Args = append(append([]string(nil), ct.pre...), c.Args...)
	x.Env = append(append([]string(nil), ct.env...), c.Env...)
	if c.Tool == "go" && !hasEnv(c.Env, "CGO_ENABLED") {
		// As natively, where a C compiler is installed: a cross
		// build would otherwise turn cgo off.
		x.Env = append(x.Env, "CGO_ENABLED=1")
	}
	x.Key = c.Key + "\x00cross " + arch
	path, err := exec.LookPath(x.Tool)
	if err != nil {
		Skip(t, "%s not installed: cannot build fixture %s for %s", x.Tool, c.Out, arch)
	}
	out, err := build(path, x)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(out), link); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
}

func hasEnv(env []string, name string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, name+"=") {
			return true
		}
	}
	return false
}
