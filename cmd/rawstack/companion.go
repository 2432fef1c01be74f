package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/rawstack/rawstack/cmd/internal/companion"
)

// Companion commands (package cmd/internal/companion) run with the
// terminal's stdin.

// runCompanion runs companion name with args until it exits or ctx is
// done (which kills it). Its output and exit status become the command's:
// a non-zero status ends rawstack with the same status.
// name may also be the path companion.Find returned.
func runCompanion(ctx context.Context, name, what string, args []string, stdout, stderr io.Writer) error {
	path := name
	if !filepath.IsAbs(name) {
		var err error
		if path, err = companion.Find(name, what); err != nil {
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
