package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/text"
	"github.com/rawstack/rawstack/symbolizer/sources"
)

var reportCmd = command{
	name:  "report",
	usage: "FILE [--top N] [--path-map OLD=NEW]... [--debug-dir DIR]... [--no-debuginfod] [--kallsyms FILE] [--symbol-path PATH] [--symbol-cache DIR] [-j N]",
	short: "symbolize a trace and print the top functions by self and total samples",
	run:   runReport,
}

// symFlags are the options shared by the commands that symbolize a trace:
// the one set every symbolizing command takes (symbolizer/sources).
type symFlags struct{ sources.Flags }

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func (s *symFlags) register(fs *flag.FlagSet) { s.Flags.Register(fs) }

func (s *symFlags) options(stderr io.Writer) (*symbolizer.Options, error) {
	o, err := s.Flags.Options()
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	warned := map[string]bool{}
	o.Warn = func(err error) {
		if !warned[err.Error()] {
			warned[err.Error()] = true
			fmt.Fprintf(stderr, "warning: %v\n", err)
		}
	}
	if isTerminal(stderr) {
		o.Progress = newProgressBar(stderr)
	}
	return o, nil
}

// parseInterleaved parses flags that may follow positional arguments
// ("report FILE --top 5").
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func buildProfile(path string, o *symbolizer.Options) (*symbolizer.Profile, error) {
	r, err := format.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	p, err := symbolizer.Build(r, o)
	if o.Progress != nil {
		o.Progress(-1, -1)
	}
	return p, err
}

func runReport(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	top := fs.Int("top", 20, "functions per table")
	var sf symFlags
	sf.register(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return &usageError{err.Error()}
	}
	if len(pos) != 1 {
		return &usageError{"want one trace FILE"}
	}
	o, err := sf.options(stderr)
	if err != nil {
		return err
	}
	p, err := buildProfile(pos[0], o)
	if err != nil {
		return err
	}
	if h := jitHint(p); h != "" {
		fmt.Fprintln(stderr, h)
	}
	return text.Write(stdout, p, *top)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// newProgressBar returns a Progress callback drawing a bar on a terminal,
// at most ten times a second; done < 0 erases it.
func newProgressBar(w io.Writer) func(done, total int) {
	var last time.Time
	shown := false
	return func(done, total int) {
		if done < 0 {
			if shown {
				fmt.Fprint(w, "\r\033[K")
			}
			return
		}
		if total == 0 || time.Since(last) < 100*time.Millisecond && done < total {
			return
		}
		last = time.Now()
		shown = true
		const width = 30
		n := done * width / total
		fmt.Fprintf(w, "\rsymbolizing [%s%s] %d/%d locations", strings.Repeat("#", n), strings.Repeat(".", width-n), done, total)
	}
}
