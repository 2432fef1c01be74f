//go:build linux

package tracking

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rawstack/rawstack/internal/idcache"
	"github.com/rawstack/rawstack/platform/linux/procfs"
)

// idCacher fills the build-id cache (internal/idcache) with the files of
// the modules a recording meets that the host cannot name later: a
// module whose recorded path, read in the host's mount namespace, is not
// the file the process mapped (a container's binary, a library of
// another distribution's root) is copied from the process's root
// (/proc/PID/root), with the separate debug file the process's root
// holds for it (its /usr/lib/debug/.build-id, its .gnu_debuglink). A
// module the host has at the same path with the same build id is not
// copied: perf copies every sampled binary into its cache, which costs
// every recording the copies of libc and the like, to guard against a
// file replaced before the report; rawstack records build ids and
// refuses a file whose build id differs, so a replaced host file leaves
// module+offset, as an uninstalled debug package does.
//
// The decision and the opening of the files happen when the module is
// met (its mmap record, or the process's first report), while the process
// lives; the copying happens on one goroutine, from the descriptors
// opened then, which keep a file readable after its process and mount
// namespace are gone. Close waits for the copies.
type idCacher struct {
	dir  string
	max  int64
	seen map[string]bool // build ids decided (copied), and build id + NUL + path (the host has it there)

	jobs chan idJob
	done chan struct{}

	files, bytes, failed, dropped atomic.Int64
	usage                         int64 // the cache's bytes, the worker's estimate
	errMu                         sync.Mutex
	firstErr                      error
}

type idJob struct {
	f     *os.File
	id    []byte
	debug bool
}

// idCacheQueue bounds the copies waiting (each holds a descriptor).
const idCacheQueue = 256

func newIDCacher(dir string, max int64) *idCacher {
	if dir == "" {
		dir = idcache.DefaultDir()
	}
	if dir == "" {
		return nil
	}
	if max <= 0 {
		max = idcache.DefaultMaxBytes
	}
	c := &idCacher{dir: dir, max: max, seen: map[string]bool{}, jobs: make(chan idJob, idCacheQueue), done: make(chan struct{}), usage: -1}
	go c.work()
	return c
}

// module decides for the module of process pid mapped from path
// whose build id is id.
func (c *idCacher) module(pid uint32, path string, id []byte) {
	if c == nil || len(id) < 2 || path == "" || !strings.HasPrefix(path, "/") {
		return
	}
	path = strings.TrimSuffix(path, " (deleted)")
	// Decided for good, per build id, when the cache has the file or a
	// copy is under way; per build id and path when the host has the
	// file at that path: the same build at a path the host does not
	// have (a container's /opt/py/lib/libpython3.12.so of the host's
	// /root/.pyenv/… one) is looked up there, by its recorded path or
	// its build id, and must be copied all the same.
	key, hostKey := string(id), string(id)+"\x00"+path
	if c.seen[key] || c.seen[hostKey] {
		return
	}
	if len(c.seen) > 1<<16 {
		clear(c.seen)
	}
	root := procfs.Dir(int(pid)) + "/root"
	inner := root + path
	// A process gone before it could be read (a container that lived
	// milliseconds) leaves the next process of the same build to try.
	switch {
	case sameFile(path, inner) || hostHas(path, id):
		key = hostKey
	case idcache.Has(c.dir, id, false):
	default:
		f, err := os.Open(inner)
		if err != nil {
			return
		}
		c.queue(f, id, false)
	}
	c.seen[key] = true
	// The process's own debug file, where the host has none.
	if hostDebug(id) || idcache.Has(c.dir, id, true) || sameRoot(root) {
		return
	}
	if f := openDebug(root, path, id); f != nil {
		c.queue(f, id, true)
	}
}

func (c *idCacher) queue(f *os.File, id []byte, debug bool) {
	select {
	case c.jobs <- idJob{f, append([]byte(nil), id...), debug}:
	default:
		f.Close()
		c.dropped.Add(1)
	}
}

func (c *idCacher) work() {
	defer close(c.done)
	for j := range c.jobs {
		n, err := idcache.Store(c.dir, j.id, j.debug, j.f, c.max)
		j.f.Close()
		if err != nil {
			c.failed.Add(1)
			c.errMu.Lock()
			if c.firstErr == nil {
				c.firstErr = err
			}
			c.errMu.Unlock()
			continue
		}
		if n == 0 {
			continue
		}
		c.files.Add(1)
		c.bytes.Add(n)
		if c.usage < 0 {
			c.usage = idcache.Usage(c.dir)
		} else {
			c.usage += n
		}
		if c.usage > c.max {
			c.usage = idcache.Prune(c.dir, c.max)
		}
	}
}

// close waits, at most wait, for the queued copies and ends the worker.
func (c *idCacher) close(wait time.Duration) {
	if c == nil {
		return
	}
	close(c.jobs)
	select {
	case <-c.done:
	case <-time.After(wait):
	}
}

// summary says what the cache got, for the record summary; "" if nothing.
func (c *idCacher) summary() string {
	if c == nil {
		return ""
	}
	files, n, failed, dropped := c.files.Load(), c.bytes.Load(), c.failed.Load(), c.dropped.Load()
	if files == 0 && failed == 0 && dropped == 0 {
		return ""
	}
	s := fmt.Sprintf("build-id cache %s: %d files (%.1f MiB) copied from processes' roots", c.dir, files, float64(n)/(1<<20))
	if failed > 0 {
		c.errMu.Lock()
		s += fmt.Sprintf(", %d failed (%v)", failed, c.firstErr)
		c.errMu.Unlock()
	}
	if dropped > 0 {
		s += fmt.Sprintf(", %d not copied (queue full)", dropped)
	}
	return s
}

// sameFile reports whether host and inner, the path in the host's and in
// the process's mount namespace, are one file.
func sameFile(host, inner string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(host, &a) != nil || syscall.Stat(inner, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// sameRoot reports whether root (/proc/PID/root) is the host's own.
func sameRoot(root string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat("/", &a) != nil || syscall.Stat(root, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// hostHas reports whether the host's file at path has build id id.
func hostHas(path string, id []byte) bool {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	ids, err := readBuildIDs(f)
	return err == nil && bytes.Equal(ids.BuildID, id)
}

// hostDebug reports whether the host has a debug file for id in its
// build-id directory.
func hostDebug(id []byte) bool {
	_, err := os.Stat(idcache.Path("/usr/lib/debug", id, true))
	return err == nil
}

// openDebug opens the separate debug file that the root of a process
// holds for its module at path: by build id, else by the module's
// .gnu_debuglink (next to it, in its .debug directory, under
// /usr/lib/debug); nil if none.
func openDebug(root, path string, id []byte) *os.File {
	if f, err := os.Open(root + idcache.Path("/usr/lib/debug", id, true)); err == nil {
		return f
	}
	ef, err := elf.Open(root + path)
	if err != nil {
		return nil
	}
	link := debuglink(ef)
	ef.Close()
	if link == "" || strings.Contains(link, "/") {
		return nil
	}
	dir := filepath.Dir(path)
	for _, p := range []string{filepath.Join(dir, link), filepath.Join(dir, ".debug", link), filepath.Join("/usr/lib/debug", dir, link)} {
		if p == path {
			continue
		}
		if f, err := os.Open(root + p); err == nil {
			return f
		}
	}
	return nil
}

// debuglink returns the file name in f's .gnu_debuglink, "" if none.
func debuglink(f *elf.File) string {
	s := f.Section(".gnu_debuglink")
	if s == nil || s.Size > 4096 {
		return ""
	}
	b, err := s.Data()
	if err != nil {
		return ""
	}
	if i := bytes.IndexByte(b, 0); i > 0 {
		return string(b[:i])
	}
	return ""
}
