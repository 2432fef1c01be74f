// Package fetch is how the debug-file locators download: debuginfod
// ([locate.Client]) and Microsoft symbol servers ([symsrv.Locate]) build
// the URL, choose the cache file and verify what arrives; a [Getter] only
// moves the bytes of one GET into a file.
//
// The package links no network code, so a program that symbolizes but
// never downloads does not pay for net/http and crypto/tls at start-up
// (about 4 ms of every rawstack command). A program that downloads in
// process links the HTTP getter, which registers itself:
//
//	import _ "github.com/rawstack/rawstack/symbolizer/fetch/httpfetch"
//
// The rawstack CLI registers a getter that runs the rawstack-fetch
// companion instead, started on the first download.
//
// [locate.Client]: https://pkg.go.dev/github.com/rawstack/rawstack/symbolizer/locate#Client
// [symsrv.Locate]: https://pkg.go.dev/github.com/rawstack/rawstack/symbolizer/symsrv#Locate
package fetch

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Request is one GET.
type Request struct {
	URL string
	// UserAgent, if set, is sent as the User-Agent header.
	UserAgent string
	// MaxSize caps the body; a larger body is an error. 0 means no cap.
	MaxSize int64
	// Timeout bounds the whole request; 0 means none beyond the context.
	Timeout time.Duration
}

// Getter performs GET requests.
type Getter interface {
	// Get stores the body of a successful (200) GET of req.URL in the
	// file path, creating or truncating it. A 404 answer is an error
	// wrapping [ErrNotFound]; every other failure names the URL.
	Get(ctx context.Context, req *Request, path string) error
}

var (
	// ErrNotFound says the server has no such file (HTTP 404).
	ErrNotFound = errors.New("fetch: not found")
	// ErrNoGetter says the program links no way to download: see the
	// package documentation.
	ErrNoGetter = errors.New(`fetch: no downloader linked (import _ "github.com/rawstack/rawstack/symbolizer/fetch/httpfetch")`)
)

var (
	mu  sync.RWMutex
	def Getter
)

// Register makes g the getter of the locators that are given none. The
// last registration wins.
func Register(g Getter) {
	mu.Lock()
	def = g
	mu.Unlock()
}

// Default returns the registered getter, nil if none.
func Default() Getter {
	mu.RLock()
	defer mu.RUnlock()
	return def
}

// Get runs req with g, or with the registered getter when g is nil.
func Get(ctx context.Context, g Getter, req *Request, path string) error {
	if g == nil {
		if g = Default(); g == nil {
			return ErrNoGetter
		}
	}
	return g.Get(ctx, req, path)
}
