package rawstackprocessor

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// negCache remembers modules searched for and not found, for ttl, at most
// size of them (the oldest forgotten first), so that a sender naming the
// same unknown build ids again and again costs one search per ttl, not
// one per request, whatever the Resolver's cache of open files holds.
type negCache struct {
	mu   sync.Mutex
	size int
	ttl  time.Duration
	now  func() time.Time
	at   map[string]time.Time
	fifo []string // insertion order, a ring of len size
	next int
}

func newNegCache(size int, ttl time.Duration, now func() time.Time) *negCache {
	return &negCache{size: size, ttl: ttl, now: now, at: map[string]time.Time{}}
}

func (c *negCache) has(k string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.at[k]
	if ok && c.now().Sub(t) >= c.ttl {
		delete(c.at, k)
		return false
	}
	return ok
}

func (c *negCache) add(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.at[k]; ok {
		c.at[k] = c.now()
		return
	}
	if len(c.fifo) < c.size {
		c.fifo = append(c.fifo, k)
	} else {
		delete(c.at, c.fifo[c.next]) // the oldest entry (or a stale slot)
		c.fifo[c.next] = k
		c.next = (c.next + 1) % c.size
	}
	c.at[k] = c.now()
}

// logInterval is how often one kind of processor message is logged: a
// hostile or broken sender can cause one per request.
const logInterval = 10 * time.Second

// logLimiter logs each kind of message at most once per interval, with
// the number of those it held back since.
type logLimiter struct {
	mu       sync.Mutex
	interval time.Duration
	now      func() time.Time
	last     map[string]time.Time
	held     map[string]int
}

func newLogLimiter(interval time.Duration, now func() time.Time) *logLimiter {
	return &logLimiter{interval: interval, now: now, last: map[string]time.Time{}, held: map[string]int{}}
}

// info logs msg at info level unless a message of kind was logged less
// than the interval ago; it reports whether it logged.
func (l *logLimiter) info(log *zap.Logger, kind, msg string, fields ...zap.Field) bool {
	l.mu.Lock()
	t := l.now()
	if last, ok := l.last[kind]; ok && t.Sub(last) < l.interval {
		l.held[kind]++
		l.mu.Unlock()
		return false
	}
	l.last[kind] = t
	held := l.held[kind]
	delete(l.held, kind)
	l.mu.Unlock()
	if held > 0 {
		fields = append(fields, zap.Int("suppressed_since_last", held))
	}
	log.Info(msg, fields...)
	return true
}
