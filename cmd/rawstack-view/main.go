// Command rawstack-view serves a pprof profile through pprof's web UI
// (github.com/google/pprof/driver: flame graph, top, source, tag filters)
// on localhost; `rawstack view FILE` symbolizes a trace into a profile
// whose samples carry thread and time tags and runs it.
//
//	rawstack-view [--http ADDR] [--no-browser] [--name NAME] PROFILE
//
// It is a command of its own because pprof's driver and its templates
// would otherwise be initialised at the start of every rawstack command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/google/pprof/driver"
	"github.com/google/pprof/profile"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "rawstack view: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rawstack-view", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("http", "localhost:", "address to serve on (an empty port picks a free one)")
	noBrowser := fs.Bool("no-browser", false, "print the URL without opening a browser")
	name := fs.String("name", "", "what to call the profile in the UI (default: the file name)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("want one pprof PROFILE file")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	p, err := profile.Parse(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	src := *name
	if src == "" {
		src = fs.Arg(0)
	}
	pargs := []string{"-http=" + *addr}
	if *noBrowser {
		pargs = append(pargs, "-no_browser")
	}
	pargs = append(pargs, src)
	return driver.PProf(&driver.Options{
		Flagset: &pprofFlags{FlagSet: flag.NewFlagSet("pprof", flag.ContinueOnError), args: pargs},
		Fetch:   fixedFetcher{p},
		UI:      &ui{stderr: stderr, browser: !*noBrowser},
		HTTPServer: func(a *driver.HTTPServerArgs) error {
			return serve(ctx, a, stdout)
		},
	})
}

// serve serves pprof's handlers as pprof's own server does (the UI under
// /ui/, "/" redirected there, only local clients when listening on a local
// address), prints the URL and stops when ctx is done.
func serve(ctx context.Context, a *driver.HTTPServerArgs, stdout io.Writer) error {
	ln, err := net.Listen("tcp", a.Hostport)
	if err != nil {
		return err
	}
	local := isLocal(a.Host)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	mux.Handle("/ui/", http.StripPrefix("/ui", h))
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

// fixedFetcher hands pprof the profile whatever the source.
type fixedFetcher struct{ p *profile.Profile }

func (f fixedFetcher) Fetch(string, time.Duration, time.Duration) (*profile.Profile, string, error) {
	return f.p, "", nil
}

// pprofFlags is pprof's flag set, parsed from the arguments chosen here.
type pprofFlags struct {
	*flag.FlagSet
	args  []string
	extra []string
}

func (f *pprofFlags) StringList(name, def, usage string) *[]*string {
	s := f.String(name, def, usage)
	return &[]*string{s}
}

func (f *pprofFlags) ExtraUsage() string      { return strings.Join(f.extra, "\n") }
func (f *pprofFlags) AddExtraUsage(eu string) { f.extra = append(f.extra, eu) }

func (f *pprofFlags) Parse(usage func()) []string {
	f.FlagSet.Usage = usage
	if err := f.FlagSet.Parse(f.args); err != nil {
		return nil
	}
	return f.FlagSet.Args()
}

// ui is pprof's UI: messages go to stderr, no interactive input.
type ui struct {
	stderr  io.Writer
	browser bool
}

func (u *ui) ReadLine(string) (string, error)     { return "", io.EOF }
func (u *ui) Print(a ...any)                      { fmt.Fprintln(u.stderr, a...) }
func (u *ui) PrintErr(a ...any)                   { fmt.Fprintln(u.stderr, a...) }
func (u *ui) IsTerminal() bool                    { return false }
func (u *ui) WantBrowser() bool                   { return u.browser }
func (u *ui) SetAutoComplete(func(string) string) {}
