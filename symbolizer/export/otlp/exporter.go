package otlp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/format"
)

// ExporterOptions configure an [Exporter].
type ExporterOptions struct {
	// Client is the endpoint and its TLS and headers.
	Client Client
	// Build says how batches are built: raw or symbolized, host name.
	Build Options
	// Interval is how often the samples seen are sent as one batch;
	// 0 means 5s.
	Interval time.Duration
	// MaxBatchSamples cuts a batch before Interval when this many samples
	// are pending, so that a busy whole-host recording does not build a
	// request above the receiver's message size limit (gRPC's default is
	// 4 MiB: ~20 B a sample raw, ~30 symbolized, a few hundred with many
	// distinct stacks); 0 means 10000.
	MaxBatchSamples int
	// Queue is how many batches wait while the endpoint is down or slow;
	// 0 means 32. When a new batch finds the queue full the oldest batch
	// is dropped and its samples are counted as lost.
	Queue int
	// CloseTimeout bounds how long Close keeps trying to deliver what is
	// queued; 0 means 10s.
	CloseTimeout time.Duration
	// Warn, if set, receives export failures (at most one per batch).
	Warn func(error)
}

// ExporterStats are an Exporter's running totals, in samples.
type ExporterStats struct {
	Samples int64 // samples read from the stream
	Sent    int64 // samples the endpoint accepted
	Lost    int64 // samples dropped: LostQueueFull + LostRejected + LostUnsent
	// Lost by reason: the queue was full (the endpoint down or slow for
	// Queue × Interval), the endpoint rejected the batch (or it could not
	// be encoded), or it was still queued when Close gave up.
	LostQueueFull, LostRejected, LostUnsent int64
	// StreamLost sums the stream's own Lost events (samples the tracer or
	// the kernel dropped before they reached the Exporter), and
	// StreamLostBy splits it by reason.
	StreamLost   int64
	StreamLostBy map[format.LostReason]int64
	Batches      int64 // batches accepted
	Bytes        int64 // protobuf bytes of the accepted batches, before compression
	WireBytes    int64 // request bytes sent for them (compressed with Client.Gzip)
	Retries      int64 // failed attempts that were retried
	Queued       int   // batches waiting now
}

// Exporter streams a rawstack stream to an OTLP endpoint as profiles. It
// is an io.Writer meant to be one of a tracer's streams
// (tracer.Options.Streams or Tracer.AddStream): the tracer writes encoded
// chunks from its stream goroutine; the Exporter decodes them on its own
// goroutine, builds a batch every Interval (sooner when MaxBatchSamples
// are pending), and sends batches from a
// bounded queue with retries and exponential back-off (0.5s doubling to
// 5s: a profile batch is due every few seconds anyway). Nothing in it waits on the network while holding the stream: a
// slow endpoint fills the queue, and the queue drops its oldest batches.
//
// Call Close after the tracer stopped to send the last batch.
type Exporter struct {
	opts ExporterOptions

	pw      *io.PipeWriter
	decoded chan struct{}
	stop    chan struct{}
	flushed chan struct{}
	sent    chan struct{}
	wake    chan struct{}

	mu    sync.Mutex
	b     *Builder
	queue []batch
	busy  bool // queue[0] is being sent
	st    ExporterStats
	err   error // decode error
	ctx   context.Context
	abort context.CancelFunc
	once  sync.Once
}

// maxBackoff caps the wait between retries.
const maxBackoff = 5 * time.Second

type batch struct {
	data    []byte
	samples int
}

// NewExporter returns an Exporter sending to opts.Client.Endpoint. It
// does not connect until the first batch.
func NewExporter(opts ExporterOptions) (*Exporter, error) {
	if opts.Client.Endpoint == "" {
		return nil, errors.New("otlp: no endpoint")
	}
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Queue <= 0 {
		opts.Queue = 32
	}
	if opts.MaxBatchSamples <= 0 {
		opts.MaxBatchSamples = 10000
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = 10 * time.Second
	}
	pr, pw := io.Pipe()
	e := &Exporter{opts: opts, pw: pw, decoded: make(chan struct{}), stop: make(chan struct{}),
		flushed: make(chan struct{}), sent: make(chan struct{}), wake: make(chan struct{}, 1)}
	e.ctx, e.abort = context.WithCancel(context.Background())
	go e.decode(pr)
	go e.batcher()
	go e.sender()
	return e, nil
}

// Write takes encoded stream bytes (the stream header first).
func (e *Exporter) Write(p []byte) (int, error) { return e.pw.Write(p) }

func (e *Exporter) decode(pr *io.PipeReader) {
	defer close(e.decoded)
	r, err := format.NewReader(pr)
	if err != nil {
		e.setErr(err)
		pr.CloseWithError(err)
		return
	}
	e.mu.Lock()
	e.b = NewBuilder(r.Header(), e.opts.Build)
	e.mu.Unlock()
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return
		}
		var ce *format.ChunkError
		if errors.As(err, &ce) {
			continue
		}
		if err != nil {
			e.setErr(err)
			pr.CloseWithError(err)
			return
		}
		e.mu.Lock()
		e.b.Event(ev)
		full := ev.Kind == format.KindSample && e.b.Counts().Pending >= e.opts.MaxBatchSamples
		e.mu.Unlock()
		if full {
			e.cut(false) // here, so that a fast writer cannot outrun the batcher
		}
	}
}

func (e *Exporter) setErr(err error) {
	e.mu.Lock()
	if e.err == nil {
		e.err = fmt.Errorf("otlp: reading the stream: %w", err)
	}
	e.mu.Unlock()
}

// batcher cuts a batch every Interval, and a last one when the stream ends.
func (e *Exporter) batcher() {
	defer close(e.flushed)
	tk := time.NewTicker(e.opts.Interval)
	defer tk.Stop()
	for {
		select {
		case <-tk.C:
			e.cut(false)
		case <-e.decoded:
			e.cut(true)
			return
		}
	}
}

// cut builds a batch of the samples pending (all of them at the end of
// the stream; before, samples waiting for JIT names wait a batch:
// Builder.Flush).
func (e *Exporter) cut(all bool) {
	e.mu.Lock()
	if e.b == nil {
		e.mu.Unlock()
		return
	}
	var p pprofile.Profiles
	var n int
	if all {
		p, n = e.b.FlushAll()
	} else {
		p, n = e.b.Flush()
	}
	e.mu.Unlock()
	if n == 0 {
		return
	}
	data, err := Marshal(p)
	e.mu.Lock()
	if err != nil {
		e.st.Lost += int64(n)
		e.st.LostRejected += int64(n)
		e.mu.Unlock()
		e.warn(err)
		return
	}
	if len(e.queue) >= e.opts.Queue {
		// Drop the oldest batch that is not being sent.
		i := 0
		if e.busy && len(e.queue) > 1 {
			i = 1
		}
		e.st.Lost += int64(e.queue[i].samples)
		e.st.LostQueueFull += int64(e.queue[i].samples)
		e.queue = append(e.queue[:i], e.queue[i+1:]...)
		if i == 0 {
			e.busy = false
		}
	}
	e.queue = append(e.queue, batch{data, n})
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Exporter) warn(err error) {
	if e.opts.Warn != nil {
		e.opts.Warn(err)
	}
}

// sender delivers queued batches in order, retrying with back-off.
func (e *Exporter) sender() {
	defer close(e.sent)
	backoff := 500 * time.Millisecond
	for {
		e.mu.Lock()
		var b batch
		have := len(e.queue) > 0
		if have {
			b = e.queue[0]
			e.busy = true
		}
		e.mu.Unlock()
		if !have {
			select {
			case <-e.wake:
				continue
			case <-e.flushed:
				e.mu.Lock()
				empty := len(e.queue) == 0
				e.mu.Unlock()
				if empty {
					return
				}
				continue
			case <-e.ctx.Done():
				return
			}
		}
		wire, err := e.opts.Client.send(e.ctx, b.data)
		e.mu.Lock()
		switch {
		case !e.busy:
			// b was dropped (and counted) while it was being sent, with a
			// queue of one.
		case err == nil:
			e.st.Sent += int64(b.samples)
			e.st.Batches++
			e.st.Bytes += int64(len(b.data))
			e.st.WireBytes += int64(wire)
		case IsRetryable(err) && e.ctx.Err() == nil:
			e.st.Retries++
		default:
			e.st.Lost += int64(b.samples)
			if IsRetryable(err) {
				e.st.LostUnsent += int64(b.samples) // Close gave up on it
			} else {
				e.st.LostRejected += int64(b.samples)
			}
		}
		if (err == nil || !IsRetryable(err) || e.ctx.Err() != nil) && e.busy {
			e.queue = append(e.queue[:0], e.queue[1:]...)
		}
		e.busy = false
		e.mu.Unlock()
		if err == nil {
			backoff = 500 * time.Millisecond
			continue
		}
		if !IsRetryable(err) {
			e.warn(err)
			continue
		}
		if e.ctx.Err() != nil {
			return
		}
		e.warn(err)
		select {
		case <-time.After(backoff):
		case <-e.ctx.Done():
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// Close ends the stream: it sends the last batch and waits up to
// CloseTimeout for the queue to drain; what is still queued then is
// counted as lost. It returns the stream decoding error, if any.
func (e *Exporter) Close() error {
	e.once.Do(func() {
		e.pw.Close()
		<-e.decoded
		<-e.flushed
		select {
		case <-e.sent:
		case <-time.After(e.opts.CloseTimeout):
			e.abort()
			<-e.sent
		}
		e.abort()
		e.opts.Client.Close()
		e.mu.Lock()
		for _, b := range e.queue {
			e.st.Lost += int64(b.samples)
			e.st.LostUnsent += int64(b.samples)
		}
		e.queue = nil
		e.mu.Unlock()
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Stats returns the running totals.
func (e *Exporter) Stats() ExporterStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.st
	if e.b != nil {
		c := e.b.Counts()
		st.Samples, st.StreamLost = c.Samples, c.Lost
		st.StreamLostBy = maps.Clone(e.b.lostBy)
	}
	st.Queued = len(e.queue)
	return st
}
