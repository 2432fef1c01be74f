// Package httpfetch downloads with net/http for the debug-file locators
// (debuginfod, symbol servers). Importing it registers it as the
// [fetch.Getter] of every locator that is given none:
//
//	import _ "github.com/rawstack/rawstack/symbolizer/fetch/httpfetch"
//
// Proxies come from HTTP_PROXY/HTTPS_PROXY/NO_PROXY and connections are
// kept alive between requests, as with Go's default client.
package httpfetch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/rawstack/rawstack/symbolizer/fetch"
)

func init() { fetch.Register(Getter{}) }

// Getter is a [fetch.Getter] over net/http.
type Getter struct {
	// Client sends the requests; nil means http.DefaultClient. Its own
	// Timeout, if any, applies besides the request's.
	Client *http.Client
}

// Get implements [fetch.Getter]. On error the file's content is
// undefined; callers download into a temporary file.
func (g Getter) Get(ctx context.Context, req *fetch.Request, path string) error {
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, req.URL, nil)
	if err != nil {
		return err
	}
	if req.UserAgent != "" {
		hreq.Header.Set("User-Agent", req.UserAgent)
	}
	c := g.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(hreq)
	if err != nil {
		return err // *url.Error: names the method and URL
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("GET %s: %s: %w", req.URL, resp.Status, fetch.ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	var body io.Reader = resp.Body
	if req.MaxSize > 0 {
		body = io.LimitReader(resp.Body, req.MaxSize+1)
	}
	n, err := io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("GET %s: %w", req.URL, err)
	}
	if req.MaxSize > 0 && n > req.MaxSize {
		return fmt.Errorf("GET %s: larger than %d bytes", req.URL, req.MaxSize)
	}
	return nil
}
