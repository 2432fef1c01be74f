package testbuild

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/platform"
)

// CI reports whether the tests run in continuous integration: the CI
// environment variable holds a true value (CI=true, as .ci/run and CI
// services set it). There a missing prerequisite is a failure, not a skip.
func CI() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}

// Skip stops a test whose prerequisite is missing: a tool, a privilege, a
// kernel feature, an installed file. It skips with the message, or under
// CI=true fails with it: CI installs everything the tests need, so a
// missing piece there is a broken CI, not a reason to pass. The message
// names what is missing.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatalf("missing prerequisite (CI=true: a failure, not a skip): %s", msg)
	}
	t.Skip(msg)
}

// Feature stops a test whose probe returned err. A missing kernel feature
// (errors.Is(err, platform.ErrNotSupported)) or privilege (a
// *platform.PermissionError) goes through [Skip]; any other error fails the
// test, since it means the probe itself is wrong. A nil err returns.
func Feature(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var perm *platform.PermissionError
	if errors.Is(err, platform.ErrNotSupported) || errors.As(err, &perm) {
		Skip(t, "%v", err)
		return
	}
	t.Fatalf("probe failed (neither a missing feature nor a missing privilege): %v", err)
}

// impossible lists what cannot exist on the machines rawstack's tests and
// CI run on (linux/amd64 hosts, as root, with .ci/run's packages), with the
// reason; a key is added with the first test that needs it. A test that
// needs one of them skips through [Impossible], even under CI=true;
// everything else missing is a prerequisite ([Skip]).
var impossible = map[string]string{
	"amd64-only": "the test's records, fixtures or oracle are amd64 (amd64 registers, an amd64 ELF); it runs on the linux/amd64 test machines and cannot run on another architecture",
	"g-register": "the goroutine pointer is read from a register known on amd64 and arm64 only",
	"not-linux":  "the test needs a Linux host (perf_event_open, ptrace, /proc); the Wine-run Windows tests and the cross builds cover the other OSes",
}

// Impossible skips t because it needs something listed in this package's
// table of things that cannot exist on the test machines; key names the
// entry. It fails the test on an unknown key, so every such skip has its
// reason in one place.
func Impossible(t testing.TB, key string) {
	t.Helper()
	why, ok := impossible[key]
	if !ok {
		keys := make([]string, 0, len(impossible))
		for k := range impossible {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.Fatalf("testbuild.Impossible: no entry %q (have %s)", key, strings.Join(keys, ", "))
	}
	t.Skipf("%s: %s", key, why)
}

// CacheRoot is the directory test fixtures and test state (a Wine prefix)
// are kept under: $RAWSTACK_FIXTURE_CACHE when set, else the user cache
// directory ($XDG_CACHE_HOME, else ~/.cache). .ci/run points
// RAWSTACK_FIXTURE_CACHE at a fresh directory, so CI builds every fixture
// from nothing.
func CacheRoot() string {
	if d := os.Getenv("RAWSTACK_FIXTURE_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return d
	}
	return os.TempDir()
}
