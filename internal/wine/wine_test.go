package wine

import (
	"context"
	"strings"
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
