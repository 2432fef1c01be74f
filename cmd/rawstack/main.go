// Command rawstack records raw stacks of running programs and symbolizes
// them offline.
//
//	rawstack record [-o FILE] [-F HZ] (-p PID [--duration D] | -- CMD ARGS...)
//	rawstack report FILE [--top N]
//	rawstack info FILE
//
// Run "rawstack help" for the full list of subcommands.
package main

import (
	"fmt"
	"io"
	"os"
)

// command is one subcommand. Each lives in its own file as a
// package-level value (recordCmd, reportCmd, ...) listed in commands.
type command struct {
	name  string
	usage string // one line: arguments
	short string // one line: what it does
	run   func(args []string, stdout, stderr io.Writer) error
}

// commands are the subcommands in order of name. A table of addresses of
// package-level values is laid out by the linker: no map built at start,
// no init function per command file and no sort before --help prints
// (each of these touched a page of code or heap at every start).
// TestCommandTable keeps it sorted and without duplicates.
var commands = [...]*command{
	&addr2lineCmd,
	&agentCmd,
	&convertCmd,
	&infoCmd,
	&recordCmd,
	&reportCmd,
	&snapshotCmd,
	&viewCmd,
}

// lookup returns the command named name, or nil.
func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// usageError makes main print the subcommand's usage line and exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usage(out io.Writer) {
	// Built in one buffer of the right size, without fmt: a
	// strings.Builder grown line by line allocated in eight size classes,
	// each a fresh heap span (two pages to fault in), and the whole of
	// --help's time is start-up.
	const head = "usage: rawstack COMMAND [ARGS]\n\n"
	size := len(head)
	for _, c := range commands {
		size += 2 + max(len(c.name), 10) + 1 + len(c.short) + 1
	}
	b := make([]byte, 0, size)
	b = append(b, head...)
	for _, c := range commands { // "  %-10s %s\n"
		b = append(b, "  "...)
		b = append(b, c.name...)
		for i := len(c.name); i < 10; i++ {
			b = append(b, ' ')
		}
		b = append(b, ' ')
		b = append(b, c.short...)
		b = append(b, '\n')
	}
	out.Write(b)
}

func main() {
	// Returning from main exits with status 0 without os.Exit's path
	// (its code and the exit hooks' are pages --help need not touch).
	if code := run(os.Args[1:], os.Stdout, os.Stderr); code != 0 {
		os.Exit(code)
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if c := lookup(args[1]); c != nil {
				fmt.Fprintf(stdout, "usage: rawstack %s %s\n\n%s\n", c.name, c.usage, c.short)
				return 0
			}
		}
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "rawstack: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err := c.run(args[1:], stdout, stderr); err != nil {
		if ue, ok := err.(*usageError); ok {
			fmt.Fprintf(stderr, "rawstack %s: %s\nusage: rawstack %s %s\n", c.name, ue.msg, c.name, c.usage)
			return 2
		}
		fmt.Fprintf(stderr, "rawstack %s: %v\n", c.name, err)
		return 1
	}
	return 0
}
