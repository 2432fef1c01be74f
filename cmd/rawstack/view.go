package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/rawstack/rawstack/cmd/internal/companion"
	"github.com/rawstack/rawstack/symbolizer/export/pprof"
)

// viewHelper serves a pprof profile through github.com/google/pprof's web
// UI (its driver package); linking that here would add its package
// initialisation (html/template and more) to every command's start.
const viewHelper = "rawstack-view"

var viewCmd = command{
	name:  "view",
	usage: "FILE [--http ADDR] [--no-browser] [--bucket DUR] [--path-map OLD=NEW]... [--debug-dir DIR]... [--no-debuginfod] [--kallsyms FILE] [--symbol-path PATH] [--symbol-cache DIR] [-j N]",
	short: "symbolize a trace and serve pprof's web UI (flame graph, top, source) on localhost",
	run: func(args []string, stdout, stderr io.Writer) error {
		// Ctrl-C stops rawstack-view (it gets the signal too) and
		// rawstack, which then removes the profile it wrote.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		return runView(ctx, args, stdout, stderr)
	},
}

// runView symbolizes the trace into a pprof profile whose samples carry
// thread and time tags, and has rawstack-view serve it until ctx is done
// (tests) or the user stops it.
func runView(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("view", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("http", "localhost:", "address to serve on (an empty port picks a free one)")
	noBrowser := fs.Bool("no-browser", false, "print the URL without opening a browser")
	bucket := fs.Duration("bucket", 100*time.Millisecond, "time granularity of the time tag (for time-range filters)")
	var sf symFlags
	sf.register(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return &usageError{err.Error()}
	}
	if len(pos) != 1 {
		return &usageError{"want one trace FILE"}
	}
	if !validHostPort(*addr) {
		return &usageError{fmt.Sprintf("--http %q: want HOST:PORT", *addr)}
	}
	helper, err := companion.Find(viewHelper, "view")
	if err != nil {
		return err
	}
	o, err := sf.options(stderr)
	if err != nil {
		return err
	}
	o.Timeline = true
	p, err := buildProfile(pos[0], o)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "rawstack-view-*.pb.gz")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	bw := bufio.NewWriter(f)
	err = pprof.WriteTimeline(bw, p, int64(*bucket))
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	vargs := []string{"--http", *addr, "--name", pos[0]}
	if *noBrowser {
		vargs = append(vargs, "--no-browser")
	}
	vargs = append(vargs, f.Name())
	return runCompanion(ctx, helper, "view", vargs, stdout, stderr)
}

// validHostPort says whether s is HOST:PORT as net.SplitHostPort takes
// it (HOST may be [IPv6]); rawstack-view listens on it. rawstack itself
// links no net package, whose initialisation every command would pay.
func validHostPort(s string) bool {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return false
	}
	host := s[:i]
	if strings.HasPrefix(host, "[") {
		return strings.HasSuffix(host, "]") && !strings.ContainsAny(host[1:len(host)-1], "[]")
	}
	return !strings.ContainsAny(host, ":[]") && !strings.ContainsAny(s[i+1:], "[]")
}
