package tracer

import (
	"io"
	"sync"
)

// stream is one output. Chunks are queued to a goroutine that writes them,
// so a slow or failed writer never blocks sampling: when the queue is full
// chunks are dropped, counted, and the stream is resynchronized (a Lost
// event and a fresh snapshot) once it has room again.
type stream struct {
	w    io.Writer
	ch   chan []byte
	done chan struct{}

	// guarded by Tracer.mu
	dropped    uint64 // samples in dropped chunks since the last resync
	droppedAll uint64
	resync     bool

	mu    sync.Mutex
	err   error
	bytes int64
}

// freeChunks recycles chunk buffers between the encoder and the stream
// goroutines without allocating (a sync.Pool of slices would allocate a
// slice header per Put). Made on first use, not at every start-up of the
// programs that link the tracer (the rawstack command among them).
var (
	freeChunksOnce sync.Once
	freeChunksCh   chan []byte
)

func freeChunks() chan []byte {
	freeChunksOnce.Do(func() { freeChunksCh = make(chan []byte, 64) })
	return freeChunksCh
}

func newStream(w io.Writer, queue int) *stream {
	s := &stream{w: w, ch: make(chan []byte, queue), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *stream) loop() {
	defer close(s.done)
	for b := range s.ch {
		s.mu.Lock()
		failed := s.err != nil
		s.mu.Unlock()
		if !failed {
			n, err := s.w.Write(b)
			s.mu.Lock()
			s.bytes += int64(n)
			if err != nil {
				s.err = err
			}
			s.mu.Unlock()
		}
		if cap(b) <= 1<<20 {
			select {
			case freeChunks() <- b[:0]:
			default:
			}
		}
	}
}

// offer queues b without blocking and reports whether it was queued.
func (s *stream) offer(b []byte) bool {
	select {
	case s.ch <- b:
		return true
	default:
		return false
	}
}

func (s *stream) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// copyChunk returns a copy of p in a recycled buffer.
func copyChunk(p []byte) []byte {
	var b []byte
	select {
	case b = <-freeChunks():
	default:
		b = make([]byte, 0, 80<<10)
	}
	return append(b, p...)
}
