package wine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestGoProgramRuns checks the prefix and the ProcessPrng shim: a Go
// program that reads crypto/rand runs under Wine.
func TestGoProgramRuns(t *testing.T) {
	w := Need(t)
	exe := w.GoBuild(t, "./testdata/hello")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := w.Command(ctx, exe).CombinedOutput()
	if err != nil {
		t.Fatalf("wine %s: %v\n%s", exe, err, out)
	}
	if !strings.HasPrefix(string(out), "hello ") {
		t.Fatalf("unexpected output %q", out)
	}
}

// TestFreshPrefixShared boots a fresh prefix from two test processes at
// once, as go test ./... does with the packages that use Wine: each must
// get the prefix only once it is ready, and run a Go program that starts
// a child process at once. Before setup took a lock and waited for the
// boot to end, the second process found system32 a tenth of a second
// into the first one's boot and ran its programs in a half-made prefix.
func TestFreshPrefixShared(t *testing.T) {
	if os.Getenv("RAWSTACK_WINE_HELPER") != "" {
		start := time.Now()
		w := Need(t)
		// The boot is over: wineserver has written the registry, and
		// the marker says so.
		for _, f := range []string{"system.reg", "user.reg", "userdef.reg", readyFile} {
			if _, err := os.Stat(filepath.Join(w.Prefix, f)); err != nil {
				t.Fatalf("setup returned before the boot finished: %v", err)
			}
		}
		t.Logf("prefix ready after %v", time.Since(start).Round(time.Millisecond))
		runHello(t, w, "child")
		return
	}
	if testing.Short() {
		t.Skip("boots a Wine prefix (a minute or more); not in -short")
	}
	w := Need(t) // the shared prefix: skips without wine, builds the shim
	exe := w.GoBuild(t, "./testdata/hello")
	cache := t.TempDir()
	var wg sync.WaitGroup
	outs := make([][]byte, 2)
	errs := make([]error, 2)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFreshPrefixShared$", "-test.v")
			cmd.Env = append(os.Environ(), "RAWSTACK_WINE_HELPER="+exe, "XDG_CACHE_HOME="+cache)
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i := range outs {
		if errs[i] != nil {
			t.Errorf("helper %d: %v\n%s", i, errs[i], outs[i])
		} else {
			t.Logf("helper %d:\n%s", i, outs[i])
		}
	}
	// The temporary prefix's wineserver outlives its last process by a
	// few seconds; wait for it before the directory is removed.
	ws := exec.Command("wineserver", "-w")
	ws.Env = append(os.Environ(), "WINEPREFIX="+filepath.Join(cache, "rawstack-test", "wineprefix"))
	if out, err := ws.CombinedOutput(); err != nil {
		t.Logf("wineserver -w: %v %s", err, out)
	}
}

// runHello runs testdata/hello (built in RAWSTACK_WINE_HELPER), which
// starts itself once more as a child process.
func runHello(t *testing.T, w *Wine, arg string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := w.Command(ctx, os.Getenv("RAWSTACK_WINE_HELPER"), arg).CombinedOutput()
	if err != nil {
		t.Fatalf("wine hello %s: %v\n%s", arg, err, out)
	}
	if n := strings.Count(string(out), "hello "); n != 2 {
		t.Fatalf("hello %s printed %d greetings, want its own and its child's: %q", arg, n, out)
	}
	fmt.Fprintf(os.Stderr, "%s", out)
}

func TestPath(t *testing.T) {
	if got := Path("/tmp/a b/x.exe"); got != `Z:\tmp\a b\x.exe` {
		t.Errorf("Path = %q", got)
	}
	if got := UnixPath(`Z:\tmp\x.exe`); got != "/tmp/x.exe" {
		t.Errorf("UnixPath = %q", got)
	}
	if got := UnixPath(`C:\windows\system32\ntdll.dll`); got != `C:\windows\system32\ntdll.dll` {
		t.Errorf("UnixPath = %q", got)
	}
}
