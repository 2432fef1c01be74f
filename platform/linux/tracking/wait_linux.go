//go:build linux

package tracking

import (
	"time"

	sys "github.com/rawstack/rawstack/internal/unix"
)

// wait blocks until a ring has records to read or timeout passes. It
// parks in Go's network poller (see [sys.Waiter]) rather than in poll(2);
// where no epoll instance can be had, it uses poll(2).
//
// A session profiling its own process (the embedded tracer) parks there
// too. A reader blocked in poll(2) holds its P for the length of the call,
// until the runtime's sysmon notices and hands the P off, which on a
// service whose sysmon has backed off to its 10 ms sleep takes up to two
// of its ticks: runtime/trace of a Go HTTP service on 2 Ps with the tracer
// at 100 Hz showed the reader in 98 blocking polls a second, 91 of them
// long enough for sysmon to take the P (benchmarks/testdata/embedsvc,
// -rtrace), and the service lost a tenth of its throughput. Parked in
// the poller the reader holds no P; it runs when the poller reports its
// rings ready, which a busy scheduler checks at each goroutine switch
// (and sysmon every 10 ms): goroutine labels read from a sample's g still
// agree with the goroutines' own CPU times (TestGoroutineLabelsSelf).
func (s *Tracker) wait(timeout time.Duration) error {
	if s.waiter == nil && !s.noWaiter {
		w, err := sys.NewWaiter()
		if err != nil {
			s.noWaiter = true
		} else {
			s.waiter = w
		}
	}
	if s.waiter == nil {
		_, err := sys.PollIn(s.Polls, int(timeout/time.Millisecond))
		return err
	}
	for ; s.nWaited < len(s.Polls); s.nWaited++ {
		if err := s.waiter.Add(int(s.Polls[s.nWaited].Fd)); err != nil {
			return err
		}
	}
	return s.waiter.Wait(timeout)
}

// closeWaiter releases the epoll instance of wait.
func (s *Tracker) closeWaiter() {
	if s.waiter != nil {
		s.waiter.Close()
		s.waiter = nil
	}
}
