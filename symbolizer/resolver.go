package symbolizer

import (
	"container/list"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rawstack/rawstack/format"
)

// Resolver symbolizes addresses one at a time, for callers that never
// see a whole stream at once: a recorder streaming batches, or a service
// that receives addresses from many hosts. It opens each module file
// (found by path and build id as [Build] finds it) once, keeps at most
// MaxFiles of them open, closing the least recently used first, and
// remembers up to MaxAddrs answers per file. A file that cannot be opened
// is remembered as such, so a missing debug file costs one search, not
// one per address; it is looked for again after a second, then after
// twice as long each time, up to every five minutes: a file a recorder
// is still copying into the build-id cache (a container's library, met
// an instant ago) is found then, where remembering the miss for good
// left it unnamed for the life of the process (the agent's Python in a
// container: every sample). A Resolver is safe for concurrent use.
type Resolver struct {
	opts     *Options
	maxFiles int
	maxAddrs int

	mu    sync.Mutex
	files map[fileKey]*resolved
	lru   *list.List // of *resolved, most recent first
}

type resolved struct {
	key   fileKey
	elem  *list.Element
	users int // callers using o; it is closed when evicted and unused
	gone  bool

	once sync.Once
	o    *Opened
	err  error
	// failed is when the open failed (UnixNano; 0: not failed), and
	// backoff how long the miss is remembered before the next search.
	failed  atomic.Int64
	backoff time.Duration

	mu    sync.Mutex
	addrs map[uint64][]Frame
}

// NewResolver returns a Resolver that opens files with opts (nil means
// the zero Options), keeping at most maxFiles files open (0 means 64) and
// maxAddrs answers per file (0 means 65536).
func NewResolver(opts *Options, maxFiles, maxAddrs int) *Resolver {
	if opts == nil {
		opts = &Options{}
	}
	if maxFiles <= 0 {
		maxFiles = 64
	}
	if maxAddrs <= 0 {
		maxAddrs = 1 << 16
	}
	return &Resolver{opts: opts, maxFiles: maxFiles, maxAddrs: maxAddrs, files: map[fileKey]*resolved{}, lru: list.New()}
}

// Resolve returns the frames of absolute address abs in module m (abs
// must be the address to look up: for a return address, one less) and
// the module-relative address. Frames are nil when nothing is known about
// the address; err says why when m's file could not be opened. The
// returned slice is shared: do not modify it.
func (r *Resolver) Resolve(m *Module, abs uint64) (frames []Frame, rel uint64, err error) {
	e := r.acquire(keyOf(m))
	defer r.release(e)
	e.once.Do(func() {
		open := opener(m.Kind)
		if open == nil && m.Kind == format.ModuleUnknown {
			open = opener(format.ModuleELF) // as Build does
		}
		if open == nil {
			e.err = fmt.Errorf("symbolizer: module %s: no symbol source for %s modules", m.Name(), m.Kind)
			return
		}
		e.o, e.err = open(m, r.opts)
		if e.err != nil {
			e.err = fmt.Errorf("symbolizer: module %s: %w", m.Name(), e.err)
			if e.backoff == retryFirst {
				r.opts.warn(e.err) // once, not at each search again
			}
			e.failed.Store(now().UnixNano())
		}
	})
	var segs []Segment
	if e.o != nil {
		segs = e.o.Segments
	}
	rel, ok := m.Relative(abs, segs)
	if e.err != nil || e.o == nil || e.o.Source == nil || !ok {
		return nil, rel, e.err
	}
	e.mu.Lock()
	fr, seen := e.addrs[rel]
	e.mu.Unlock()
	if seen {
		return fr, rel, nil
	}
	fr, _ = e.o.Source.Symbolize(rel, nil)
	e.mu.Lock()
	if len(e.addrs) >= r.maxAddrs {
		clear(e.addrs)
	}
	e.addrs[rel] = fr
	e.mu.Unlock()
	return fr, rel, nil
}

// The first search after a miss, and the longest wait between two.
const (
	retryFirst = time.Second
	retryMax   = 5 * time.Minute
)

// now is time.Now; tests move it.
var now = time.Now

// due reports whether e, a file not found, is to be looked for again.
func (e *resolved) due() bool {
	f := e.failed.Load()
	return f != 0 && now().UnixNano()-f >= int64(e.backoff)
}

func (r *Resolver) acquire(k fileKey) *resolved {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.files[k]
	backoff := retryFirst
	if e != nil && e.due() {
		// Forget the miss: a new entry searches again.
		backoff = min(2*e.backoff, retryMax)
		r.lru.Remove(e.elem)
		delete(r.files, k)
		e.gone = true
		if e.users == 0 {
			e.close()
		}
		e = nil
	}
	if e != nil {
		r.lru.MoveToFront(e.elem)
	} else {
		e = &resolved{key: k, addrs: map[uint64][]Frame{}, backoff: backoff}
		e.elem = r.lru.PushFront(e)
		r.files[k] = e
		for r.lru.Len() > r.maxFiles {
			old := r.lru.Back().Value.(*resolved)
			r.lru.Remove(old.elem)
			delete(r.files, old.key)
			old.gone = true
			if old.users == 0 {
				old.close()
			}
		}
	}
	e.users++
	return e
}

func (r *Resolver) release(e *resolved) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.users--
	if e.gone && e.users == 0 {
		e.close()
	}
}

func (e *resolved) close() {
	e.once.Do(func() {}) // an eviction before the first open: never open
	if e.o != nil && e.o.Source != nil {
		e.o.Source.Close()
		e.o = nil
	}
}

// Known reports whether m's file has been looked for already (found, or
// remembered as missing and not yet due to be looked for again) and is
// still cached: resolving in it costs no search. A service that bounds the searches a request may cause (a
// hostile sender can name any number of build ids) asks this first.
func (r *Resolver) Known(m *Module) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.files[keyOf(m)]
	return ok && !e.due()
}

// Open reports how many module files are open or remembered.
func (r *Resolver) Open() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.files)
}

// Close closes every open file. The Resolver stays usable.
func (r *Resolver) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, e := range r.files {
		r.lru.Remove(e.elem)
		delete(r.files, k)
		e.gone = true
		if e.users == 0 {
			e.close()
		}
	}
	return nil
}
