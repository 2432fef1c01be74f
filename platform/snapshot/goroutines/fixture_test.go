package goroutines

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// buildParked builds testdata/parked with extra go build flags.
func buildParked(t testing.TB, flags ...string) string {
	t.Helper()
	args := append([]string{"build"}, flags...)
	args = append(args, "-o", "{dir}/parked", ".")
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "go",
		Args:   args,
		Inputs: []string{"testdata/parked"},
		Out:    "parked",
		Env:    []string{"CGO_ENABLED=0", "GOFLAGS="},
		Dir:    dir + "/testdata/parked",
	})
}

// startParked starts the fixture, waits for "ready" and returns it and
// the address of its /debug/pprof server ("" without -http). It is killed
// when the test ends.
func startParked(t testing.TB, bin string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	type line struct {
		addr string
		ok   bool
	}
	ready := make(chan line, 1)
	go func() {
		sc := bufio.NewScanner(out)
		addr := ""
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "http "); ok {
				addr = a
			}
			if sc.Text() == "ready" {
				ready <- line{addr, true}
				return
			}
		}
		ready <- line{}
	}()
	select {
	case l := <-ready:
		if !l.ok {
			t.Fatalf("%s exited before it was ready", bin)
		}
		return cmd, l.addr
	case <-time.After(60 * time.Second):
		t.Fatalf("%s not ready after 60s", bin)
	}
	return nil, ""
}
