package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// maxExtraFaults is how many more pages than an empty Go program
// "rawstack --help" may touch: 90 to 110 when downloads moved to
// rawstack-fetch, 155 with net/http and crypto/tls linked. On a virtual machine whose
// hypervisor handles guest page faults (about 15 µs each on the one this
// was measured on) the count is most of the start-up time, and unlike
// the time it does not vary with the machine's load.
const maxExtraFaults = 135

// TestStartupPageFaults counts the minor page faults of rawstack --help
// and of an empty Go program built the same way (least of 5 runs each).
func TestStartupPageFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI")
	}
	bin := buildCLI(t)
	goTool := testbuild.Need(t, "go", "builds the empty Go program")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module empty\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	b := exec.Command(goTool, "build", "-o", empty, ".")
	b.Dir = dir
	b.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := b.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	faults := func(args ...string) int64 {
		least := int64(-1)
		for i := 0; i < 5; i++ {
			c := exec.Command(args[0], args[1:]...)
			if err := c.Run(); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			if n := c.ProcessState.SysUsage().(*syscall.Rusage).Minflt; least < 0 || n < least {
				least = n
			}
		}
		return least
	}
	raw, floor := faults(bin, "--help"), faults(empty)
	t.Logf("minor page faults: rawstack --help %d, empty Go program %d", raw, floor)
	if raw-floor > maxExtraFaults {
		t.Errorf("rawstack --help touches %d pages more than an empty Go program, budget %d: see TestStartupInitCost's table for the packages whose init grew", raw-floor, maxExtraFaults)
	}
}
