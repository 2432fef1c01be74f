package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/google/pprof/driver"
	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/symbolizer/export/pprof"
)

func init() {
	register(&command{
		name:  "view",
		usage: "FILE [--http ADDR] [--no-browser] [--bucket DUR] [--path-map OLD=NEW]... [--debug-dir DIR]... [--no-debuginfod] [--kallsyms FILE]",
		short: "symbolize a trace and serve pprof's web UI (flame graph, top, source) on localhost",
		run: func(args []string, stdout, stderr io.Writer) error {
			return runView(context.Background(), args, stdout, stderr)
		},
	})
}

// runView serves until ctx is done (tests) or the process is stopped.
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
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return &usageError{fmt.Sprintf("--http %q: want HOST:PORT", *addr)}
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
	pp := pprof.ConvertTimeline(p, int64(*bucket))
	ui := &viewUI{stderr: stderr, browser: !*noBrowser}
	pargs := []string{"-http=" + *addr}
	if *noBrowser {
		pargs = append(pargs, "-no_browser")
	}
	pargs = append(pargs, pos[0])
	return driver.PProf(&driver.Options{
		Flagset: &viewFlags{FlagSet: flag.NewFlagSet("pprof", flag.ContinueOnError), args: pargs},
		Fetch:   fixedFetcher{pp},
		UI:      ui,
		HTTPServer: func(a *driver.HTTPServerArgs) error {
			return serveView(ctx, a, stdout)
		},
	})
}

// serveView serves pprof's handlers and prints the URL.
func serveView(ctx context.Context, a *driver.HTTPServerArgs, stdout io.Writer) error {
	ln, err := net.Listen("tcp", a.Hostport)
	if err != nil {
		return err
	}
	// As pprof's own server: the UI under /ui/, "/" redirected there,
	// and only local clients served when listening on a local address.
	local := isLocal(a.Host)
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if host, _, err := net.SplitHostPort(r.RemoteAddr); local && (err != nil || !isLocal(host)) {
			http.Error(w, "permission denied", http.StatusForbidden)
			return
		}
		h := a.Handlers[r.URL.Path]
		if h == nil {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", ui))
	mux.Handle("/", http.RedirectHandler("/ui/", http.StatusTemporaryRedirect))
	srv := &http.Server{Handler: mux}
	fmt.Fprintf(stdout, "rawstack view: http://%s/ui/ (flame graph; top, source and tag filters in the menus); stop with Ctrl-C\n", ln.Addr())
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func isLocal(host string) bool {
	switch host {
	case "localhost", "127.0.0.1", "::1", "[::1]":
		return true
	}
	return false
}

// fixedFetcher hands pprof the symbolized profile whatever the source.
type fixedFetcher struct{ p *profile.Profile }

func (f fixedFetcher) Fetch(string, time.Duration, time.Duration) (*profile.Profile, string, error) {
	return f.p, "", nil
}

// viewFlags is pprof's flag set, parsed from the arguments view chose.
type viewFlags struct {
	*flag.FlagSet
	args  []string
	extra []string
}

func (f *viewFlags) StringList(name, def, usage string) *[]*string {
	s := f.String(name, def, usage)
	return &[]*string{s}
}

func (f *viewFlags) ExtraUsage() string      { return strings.Join(f.extra, "\n") }
func (f *viewFlags) AddExtraUsage(eu string) { f.extra = append(f.extra, eu) }

func (f *viewFlags) Parse(usage func()) []string {
	f.FlagSet.Usage = usage
	if err := f.FlagSet.Parse(f.args); err != nil {
		return nil
	}
	return f.FlagSet.Args()
}

// viewUI is pprof's UI: messages go to stderr, no interactive input.
type viewUI struct {
	stderr  io.Writer
	browser bool
}

func (u *viewUI) ReadLine(string) (string, error)     { return "", io.EOF }
func (u *viewUI) Print(a ...any)                      { fmt.Fprintln(u.stderr, a...) }
func (u *viewUI) PrintErr(a ...any)                   { fmt.Fprintln(u.stderr, a...) }
func (u *viewUI) IsTerminal() bool                    { return false }
func (u *viewUI) WantBrowser() bool                   { return u.browser }
func (u *viewUI) SetAutoComplete(func(string) string) {}
