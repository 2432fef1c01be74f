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
	"slices"
)

// command is one subcommand. Each lives in its own file and registers itself
// from init, so subcommands can be added without touching this file.
type command struct {
	name  string
	usage string // one line: arguments
	short string // one line: what it does
	run   func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("rawstack: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// usageError makes main print the subcommand's usage line and exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usage(out io.Writer) {
	// Built in one buffer of the right size, without fmt: a
	// strings.Builder grown line by line allocated in eight size classes,
	// each a fresh heap span (two pages to fault in), and the whole of
	// --help's time is start-up.
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	const head = "usage: rawstack COMMAND [ARGS]\n\n"
	size := len(head)
	for _, n := range names {
		size += 2 + max(len(n), 10) + 1 + len(commands[n].short) + 1
	}
	b := make([]byte, 0, size)
	b = append(b, head...)
	for _, n := range names { // "  %-10s %s\n"
		b = append(b, "  "...)
		b = append(b, n...)
		for i := len(n); i < 10; i++ {
			b = append(b, ' ')
		}
		b = append(b, ' ')
		b = append(b, commands[n].short...)
		b = append(b, '\n')
	}
	out.Write(b)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
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
	c, ok := commands[args[0]]
	if !ok {
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
