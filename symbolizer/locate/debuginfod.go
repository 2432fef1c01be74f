package locate

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rawstack/rawstack/symbolizer/fetch"
)

// Client downloads files from debuginfod servers (the protocol of
// elfutils' debuginfod: GET URL/buildid/HEX/debuginfo|executable), keeps
// them in a local cache and verifies their build id before use.
//
// The bytes move through a [fetch.Getter]: Getter if set, else the one
// the program registered (import
// github.com/rawstack/rawstack/symbolizer/fetch/httpfetch for net/http;
// the rawstack CLI registers its rawstack-fetch companion). Without
// either, Fetch fails with [fetch.ErrNoGetter].
type Client struct {
	URLs     []string
	CacheDir string
	// Timeout bounds one request; 0 means 30s.
	Timeout time.Duration
	// MaxSize caps a download; 0 means 4 GiB.
	MaxSize int64
	// Getter downloads; nil means fetch.Default().
	Getter fetch.Getter
}

// NewClientFromEnv returns a client for DEBUGINFOD_URLS (space separated),
// caching in DEBUGINFOD_CACHE_PATH or the user cache directory, with
// DEBUGINFOD_TIMEOUT (seconds) as the timeout; nil when DEBUGINFOD_URLS
// is empty.
func NewClientFromEnv() *Client {
	urls := strings.Fields(os.Getenv("DEBUGINFOD_URLS"))
	if len(urls) == 0 {
		return nil
	}
	c := &Client{URLs: urls, CacheDir: os.Getenv("DEBUGINFOD_CACHE_PATH")}
	if s, err := strconv.Atoi(os.Getenv("DEBUGINFOD_TIMEOUT")); err == nil && s > 0 {
		c.Timeout = time.Duration(s) * time.Second
	}
	return c
}

func (c *Client) cacheDir() string {
	if c.CacheDir != "" {
		return c.CacheDir
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "rawstack", "debuginfod")
	}
	return filepath.Join(os.TempDir(), "rawstack-debuginfod")
}

// Fetch returns the path of the cached file of the given kind
// ("debuginfo" or "executable") for buildID, downloading it if needed.
func (c *Client) Fetch(buildID []byte, kind string) (string, error) {
	if len(buildID) == 0 {
		return "", errors.New("debuginfod: no build id")
	}
	h := hex.EncodeToString(buildID)
	dst := filepath.Join(c.cacheDir(), h, kind)
	if ok, _ := hasBuildID(dst, buildID); ok {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("debuginfod: %w", err)
	}
	var errs []string
	for _, u := range c.URLs {
		err := c.download(strings.TrimRight(u, "/")+"/buildid/"+h+"/"+kind, dst, buildID)
		if err == nil {
			return dst, nil
		}
		if errors.Is(err, fetch.ErrNoGetter) {
			return "", fmt.Errorf("debuginfod: %w", err)
		}
		errs = append(errs, err.Error())
	}
	return "", fmt.Errorf("debuginfod: %s", strings.Join(errs, "; "))
}

func (c *Client) download(url, dst string, buildID []byte) error {
	t := c.Timeout
	if t == 0 {
		t = 30 * time.Second
	}
	max := c.MaxSize
	if max <= 0 {
		max = 4 << 30
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".part-*")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := fetch.Get(context.Background(), c.Getter, &fetch.Request{URL: url, MaxSize: max, Timeout: t}, tmp.Name()); err != nil {
		return err
	}
	f, err := elf.Open(tmp.Name())
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	got := BuildID(f)
	f.Close()
	if !bytes.Equal(got, buildID) {
		return fmt.Errorf("GET %s: build id %x, want %x", url, got, buildID)
	}
	return os.Rename(tmp.Name(), dst)
}
