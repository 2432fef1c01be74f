package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"

	"github.com/rawstack/rawstack/cmd/internal/companion"
	"github.com/rawstack/rawstack/internal/fetchproto"
	"github.com/rawstack/rawstack/symbolizer/fetch"
)

// Downloads (debuginfod, symbol servers) go through the rawstack-fetch
// companion, so that rawstack links no net/http or crypto/tls: their
// initialisation and size cost every command about 4 ms, and few commands
// download. The companion starts on the first download and serves the
// rest of the command's downloads over one pipe (connections stay alive
// between them); it exits when rawstack does.
const fetchHelper = "rawstack-fetch"

func init() { fetch.Register(&companionGetter{}) }

// companionGetter is a fetch.Getter that asks rawstack-fetch.
type companionGetter struct {
	mu      sync.Mutex
	warned  bool           // that the companion is missing
	in      io.WriteCloser // nil until started, and after the companion died
	next    uint64
	waiting map[uint64]chan error
}

func (g *companionGetter) Get(ctx context.Context, req *fetch.Request, path string) error {
	ch := make(chan error, 1)
	g.mu.Lock()
	if g.in == nil {
		if err := g.start(); err != nil {
			g.mu.Unlock()
			return err
		}
	}
	g.next++
	id := g.next
	g.waiting[id] = ch
	_, err := g.in.Write(fetchproto.AppendGet(nil, id, req, path))
	in := g.in
	g.mu.Unlock()
	if err != nil {
		g.forget(id)
		return fmt.Errorf("%s: %w", fetchHelper, err)
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		g.forget(id)
		g.mu.Lock()
		if g.in == in {
			in.Write(fetchproto.AppendCancel(nil, id))
		}
		g.mu.Unlock()
		return ctx.Err()
	}
}

func (g *companionGetter) forget(id uint64) {
	g.mu.Lock()
	delete(g.waiting, id)
	g.mu.Unlock()
}

// start runs the companion; g.mu is held.
func (g *companionGetter) start() error {
	path, err := companion.Find(fetchHelper, "downloading debug files (DEBUGINFOD_URLS, symbol servers in _NT_SYMBOL_PATH)")
	if err != nil {
		// The locators note a failed download only where nothing else
		// was found; a missing command deserves to be said once.
		if !g.warned {
			g.warned = true
			fmt.Fprintf(os.Stderr, "rawstack: %v\n", err)
		}
		return err
	}
	cmd := exec.Command(path, "-serve")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		in.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		in.Close()
		return fmt.Errorf("%s: %w", fetchHelper, err)
	}
	g.in, g.waiting = in, map[uint64]chan error{}
	go g.read(cmd, in, out)
	return nil
}

// read delivers the companion's replies until it exits, then fails what
// is still waiting; the next Get starts a new companion.
func (g *companionGetter) read(cmd *exec.Cmd, in io.WriteCloser, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 4096), fetchproto.MaxLine+1)
	var failure error
	for sc.Scan() {
		m, err := fetchproto.Parse(sc.Text())
		if err == nil && m.Op != 'R' {
			err = fmt.Errorf("%w: not a reply", fetchproto.ErrSyntax)
		}
		if err != nil {
			failure = err
			break
		}
		g.mu.Lock()
		ch := g.waiting[m.ID]
		delete(g.waiting, m.ID)
		g.mu.Unlock()
		if ch != nil {
			ch <- m.Err
		}
	}
	in.Close()
	cmd.Process.Kill() // after a protocol error; a no-op once it exited
	werr := cmd.Wait()
	if failure == nil {
		failure = werr
	}
	if failure == nil {
		failure = errors.New("exited")
	}
	g.mu.Lock()
	if g.in == in {
		g.in = nil
	}
	for id, ch := range g.waiting {
		ch <- fmt.Errorf("%s: %w", fetchHelper, failure)
		delete(g.waiting, id)
	}
	g.mu.Unlock()
}
