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

// TestCommandTable keeps the static command table sorted by name (the
// order --help lists) and free of duplicates, which a map used to
// guarantee.
func TestCommandTable(t *testing.T) {
	for i, c := range commands {
		if c.name == "" || c.run == nil || c.short == "" {
			t.Errorf("command %d (%q) lacks a name, a run function or a description", i, c.name)
		}
		if i > 0 && commands[i-1].name >= c.name {
			t.Errorf("commands[%d] %q is not after %q: keep the table sorted and without duplicates", i, c.name, commands[i-1].name)
		}
		if lookup(c.name) != c {
			t.Errorf("lookup(%q) does not find its command", c.name)
		}
	}
	if lookup("no-such-command") != nil {
		t.Error("lookup found a command that does not exist")
	}
}
