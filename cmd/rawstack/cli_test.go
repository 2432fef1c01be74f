package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

var (
	cliOnce sync.Once
	cliPath string
	cliErr  []byte
)

// buildCLI builds rawstack as the README does (CGO_ENABLED=0), once per
// test binary, for tests that need a separate process (start-up, SIGKILL).
func buildCLI(t *testing.T) string {
	t.Helper()
	goTool := testbuild.Need(t, "go", "builds the CLI as the README does")
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rawstack-cli-")
		if err != nil {
			cliErr = []byte(err.Error())
			return
		}
		bin := filepath.Join(dir, "rawstack")
		cmd := exec.Command(goTool, "build", "-o", bin, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = append([]byte(err.Error()+"\n"), out...)
			return
		}
		cliPath = bin
	})
	if cliPath == "" {
		t.Fatalf("go build: %s", cliErr)
	}
	return cliPath
}
