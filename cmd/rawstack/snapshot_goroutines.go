package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// goroutinesHelper is the command that lists goroutines. It links
// github.com/go-delve/delve, whose package initialisation would slow the
// start of every rawstack command, so it is a binary of its own, looked
// for next to rawstack and then on PATH.
const goroutinesHelper = "rawstack-goroutines"

// wantsGoroutines reports whether snapshot's arguments ask for goroutines.
func wantsGoroutines(args []string) bool {
	for _, a := range args {
		switch a {
		case "--goroutines", "-goroutines", "--goroutines=true", "-goroutines=true":
			return true
		case "--":
			return false
		}
	}
	return false
}

// runGoroutines runs rawstack-goroutines with snapshot's arguments; its
// output and exit status become the command's.
func runGoroutines(args []string, stdout, stderr io.Writer) error {
	path := ""
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), goroutinesHelper)
		if _, err := os.Stat(p); err == nil {
			path = p
		}
	}
	if path == "" {
		p, err := exec.LookPath(goroutinesHelper)
		if err != nil {
			return fmt.Errorf("--goroutines needs the %s command next to rawstack or on PATH "+
				"(go install github.com/rawstack/rawstack/cmd/%s@latest)", goroutinesHelper, goroutinesHelper)
		}
		path = p
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		os.Exit(ee.ExitCode()) // it has said why
	}
	return err
}
