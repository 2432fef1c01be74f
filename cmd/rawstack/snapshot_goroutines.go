package main

import (
	"context"
	"io"
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
	return runCompanion(context.Background(), goroutinesHelper, "--goroutines", args, stdout, stderr)
}
