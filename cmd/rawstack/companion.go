package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// Companion commands are subcommands built as binaries of their own
// because they link packages whose initialisation would slow the start of
// every rawstack command (delve for snapshot --goroutines, pprof's web UI
// for view). rawstack looks for them next to its own executable, then on
// PATH, and runs them with the terminal's stdin.

// findCompanion returns the path of the companion command name.
func findCompanion(name, what string) (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s needs the %s command next to rawstack or on PATH "+
			"(go build -o . ./cmd/... builds it beside rawstack; or go install github.com/rawstack/rawstack/cmd/%s@latest)", what, name, name)
	}
	return p, nil
}

// runCompanion runs companion name with args until it exits or ctx is
// done (which kills it). Its output and exit status become the command's:
// a non-zero status ends rawstack with the same status.
// name may also be the path findCompanion returned.
func runCompanion(ctx context.Context, name, what string, args []string, stdout, stderr io.Writer) error {
	path := name
	if !filepath.IsAbs(name) {
		var err error
		if path, err = findCompanion(name, what); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil // stopped by the caller
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		os.Exit(ee.ExitCode()) // it has said why
	}
	return err
}
