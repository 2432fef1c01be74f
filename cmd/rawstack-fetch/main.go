// Command rawstack-fetch downloads debug files for rawstack: the ELF
// debug files and executables of debuginfod servers (DEBUGINFOD_URLS) and
// the PDBs and PE images of symbol servers (_NT_SYMBOL_PATH). rawstack
// builds the URLs, picks the cache files and verifies build ids and PDB
// signatures; this command only moves the bytes.
//
//	rawstack-fetch -serve                     the protocol of internal/fetchproto on stdin/stdout
//	rawstack-fetch [-timeout D] -o FILE URL   one GET, by hand
//
// It is a command of its own because net/http and crypto/tls take about
// 4 ms to initialise and link, which every rawstack command would pay;
// rawstack starts it on its first download only.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/rawstack/rawstack/internal/fetchproto"
	"github.com/rawstack/rawstack/symbolizer/fetch"
	"github.com/rawstack/rawstack/symbolizer/fetch/httpfetch"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "rawstack-fetch: %v\n", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage: rawstack-fetch -serve | rawstack-fetch [-timeout D] -o FILE URL")

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rawstack-fetch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	serveMode := fs.Bool("serve", false, "answer the requests of rawstack on stdin/stdout until stdin ends")
	out := fs.String("o", "", "with URL: the file to write")
	timeout := fs.Duration("timeout", 60*time.Second, "with URL: bound on the request")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	var g fetch.Getter = httpfetch.Getter{}
	if *serveMode {
		if fs.NArg() != 0 {
			return errUsage
		}
		return serve(g, stdin, stdout)
	}
	if fs.NArg() != 1 || *out == "" {
		return errUsage
	}
	return g.Get(context.Background(), &fetch.Request{URL: fs.Arg(0), Timeout: *timeout}, *out)
}

// serve answers get and cancel messages until in ends, then cancels what
// is still running and returns once it has stopped.
func serve(g fetch.Getter, in io.Reader, out io.Writer) error {
	ctx, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	var (
		mu      sync.Mutex // guards w and running
		w       = bufio.NewWriter(out)
		running = map[uint64]context.CancelFunc{}
		wg      sync.WaitGroup
	)
	reply := func(id uint64, err error) {
		mu.Lock()
		defer mu.Unlock()
		delete(running, id)
		w.Write(fetchproto.AppendReply(nil, id, err))
		w.Flush()
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 4096), fetchproto.MaxLine+1)
	for sc.Scan() {
		m, err := fetchproto.Parse(sc.Text())
		if err != nil {
			return err
		}
		switch m.Op {
		case 'G':
			rctx, cancel := context.WithCancel(ctx)
			mu.Lock()
			running[m.ID] = cancel
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer cancel()
				reply(m.ID, g.Get(rctx, &m.Req, m.Path))
			}()
		case 'C':
			mu.Lock()
			if cancel := running[m.ID]; cancel != nil {
				cancel()
			}
			mu.Unlock()
		default:
			return fmt.Errorf("unexpected message %q", sc.Text())
		}
	}
	cancelAll()
	wg.Wait()
	return sc.Err()
}
