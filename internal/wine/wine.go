// Package wine runs Windows test programs under Wine on a Linux host: one
// cached Wine prefix shared by every package's tests (booted by one test
// process under a file lock while the others wait, and used only once
// its boot is complete), the ProcessPrng shim
// Go programs need on Wine 8, Windows builds of Go test binaries and
// conversions between Unix paths and the Z: drive Wine maps them to.
//
//	w := wine.Need(t)                                   // skips without wine
//	exe := w.GoTest(t, ".")                             // GOOS=windows go test -c
//	out, err := w.Command(exe, "-test.run=^TestX$").CombinedOutput()
//
// Go 1.21 and later fill their random state through ProcessPrng from
// bcryptprimitives.dll, which Wine 8 does not have; the prefix gets a
// bcryptprimitives.dll built from testdata/processprng.c with mingw-w64
// that implements it with SystemFunction036 (RtlGenRandom), and programs
// run with WINEDLLOVERRIDES preferring it over Wine's builtin.
package wine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// Wine is a ready prefix.
type Wine struct {
	Prefix string // WINEPREFIX
	wine   string // the wine program
}

var (
	once    sync.Once
	shared  *Wine
	initErr error
)

// Need returns the shared prefix, booting it and installing the shim the
// first time (about a minute). It skips the test when wine or mingw-w64 is
// missing and fails it when the prefix cannot be set up.
func Need(t testing.TB) *Wine {
	t.Helper()
	if runtime.GOOS != "linux" {
		testbuild.Impossible(t, "not-linux") // Wine runs on Linux hosts
	}
	if runtime.GOARCH != "amd64" {
		testbuild.Impossible(t, "amd64-only") // x86-64 Wine runs amd64 binaries
	}
	wineBin := testbuild.Need(t, "wine", "runs the Windows back end's tests")
	shim := testbuild.Build(t, testbuild.Cmd{
		Tool:   "x86_64-w64-mingw32-gcc",
		Args:   []string{"-O2", "-shared", "-s", "-o", "{dir}/bcryptprimitives.dll", "{in0}", "-ladvapi32"},
		Inputs: []string{ShimSource()},
		Out:    "bcryptprimitives.dll",
	})
	once.Do(func() { shared, initErr = setup(wineBin, shim) })
	if initErr != nil {
		t.Fatalf("wine prefix: %v", initErr)
	}
	return shared
}

// ShimSource is the shim's C source, found from this file so that any
// package's test (or the benchmarks) can build it.
func ShimSource() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "processprng.c")
}

// PrefixDir is where the shared prefix lives, under the fixture cache
// (testbuild.CacheRoot): the directory arch/winunwind's tests use too.
func PrefixDir() string {
	return filepath.Join(testbuild.CacheRoot(), "rawstack-test", "wineprefix")
}

// Open sets up the shared prefix outside a test (the benchmarks) with a
// shim DLL the caller built from ShimSource.
func Open(shimDLL string) (*Wine, error) {
	wineBin, err := exec.LookPath("wine")
	if err != nil {
		return nil, err
	}
	return setup(wineBin, shimDLL)
}

// readyFile marks a prefix whose boot finished: written after wineboot
// and every Wine process it started have exited.
const readyFile = ".rawstack-ready"

// setup boots the shared prefix if it has not been booted yet and
// installs the shim. Test binaries of several packages run at once (go
// test ./...) and share the prefix, so the work is done under a file
// lock: one process boots, the others wait for it and then find the
// prefix ready. A prefix is ready when readyFile exists, not when its
// directories do: Wine creates drive_c/windows/system32 in the first
// tenth of a second of a boot that takes seconds to a minute, and a
// program started in a half-made prefix fails in ways that depend on
// timing (the likely cause of a child process that once failed to start
// with Wine's "Internal error" on a fresh machine).
func setup(wineBin, shim string) (*Wine, error) {
	w := &Wine{Prefix: PrefixDir(), wine: wineBin}
	// Wine creates the prefix directory but not its parents.
	if err := os.MkdirAll(filepath.Dir(w.Prefix), 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockFile(w.Prefix + ".lock")
	if err != nil {
		return nil, fmt.Errorf("locking the wine prefix %s: %w", w.Prefix, err)
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(w.Prefix, readyFile)); err != nil {
		if err := w.boot(); err != nil {
			return nil, err
		}
	}
	b, err := os.ReadFile(shim)
	if err != nil {
		return nil, err
	}
	dst := filepath.Join(w.Prefix, "drive_c", "windows", "system32", "bcryptprimitives.dll")
	if old, err := os.ReadFile(dst); err != nil || string(old) != string(b) {
		tmp := dst + ".tmp" + fmt.Sprint(os.Getpid())
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, dst); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// boot creates the prefix afresh (a prefix without readyFile is one whose
// boot was cut short) and waits until it is complete: wineboot -i
// returns while the services it started are still running, so boot then
// waits for the prefix's wineserver to exit (wineserver -w), which it
// does once every process of the prefix has ended and the registry is
// written.
func (w *Wine) boot() error {
	if err := os.RemoveAll(w.Prefix); err != nil {
		return err
	}
	server, err := exec.LookPath("wineserver")
	if err != nil {
		return fmt.Errorf("wineserver, which boots the prefix with wine: %w", err)
	}
	// A Wine that hangs must not hold the test run forever.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, cmd := range []*exec.Cmd{
		exec.CommandContext(ctx, w.wine, "wineboot", "-i"),
		exec.CommandContext(ctx, server, "-w"),
	} {
		cmd.Env = w.Env()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("booting the wine prefix %s: %s: %v\n%s", w.Prefix, strings.Join(cmd.Args, " "), err, out)
		}
	}
	version, _ := exec.Command(w.wine, "--version").Output()
	return os.WriteFile(filepath.Join(w.Prefix, readyFile), version, 0o644)
}

// Env is the environment Windows programs run with: the prefix, no Wine
// debug output, the shim preferred over Wine's builtin DLL.
func (w *Wine) Env() []string {
	return append(os.Environ(), "WINEPREFIX="+w.Prefix, "WINEDEBUG=-all",
		"WINEDLLOVERRIDES=bcryptprimitives=n,b")
}

// Command returns a command running the Windows program exe under Wine.
func (w *Wine) Command(ctx context.Context, exe string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, w.wine, append([]string{exe}, args...)...)
	cmd.Env = w.Env()
	return cmd
}

// GoTest builds the Windows test binary of the package in dir (relative
// to the test's working directory) into a temporary directory and returns
// its path. Go's build cache makes rebuilds cheap.
func (w *Wine) GoTest(t testing.TB, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pkg.test.exe")
	cmd := exec.Command("go", "test", "-c", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=windows go test -c in %s: %v\n%s", dir, err, b)
	}
	return out
}

// GoBuild builds the Windows program pkg (a package path or ./dir) and
// returns its path.
func (w *Wine) GoBuild(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	name := filepath.Base(pkg)
	if name == "." || name == string(filepath.Separator) {
		name = "prog"
	}
	out := filepath.Join(t.TempDir(), name+".exe")
	args := append(append([]string{"build", "-o", out}, flags...), pkg)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=windows go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// Path converts an absolute Unix path to the Windows path Wine maps it to
// (its Z: drive).
func Path(unix string) string {
	abs, err := filepath.Abs(unix)
	if err != nil {
		abs = unix
	}
	return "Z:" + strings.ReplaceAll(abs, "/", `\`)
}

// UnixPath converts a path on Wine's Z: drive back to the Unix path; other
// paths are returned unchanged.
func UnixPath(win string) string {
	if len(win) >= 2 && (win[0] == 'Z' || win[0] == 'z') && win[1] == ':' {
		return strings.ReplaceAll(win[2:], `\`, "/")
	}
	return win
}
