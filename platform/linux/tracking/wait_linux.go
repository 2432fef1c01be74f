//go:build linux

package tracking

import (
	"time"

	sys "github.com/rawstack/rawstack/internal/unix"
)

// wait blocks until a ring has records to read or timeout passes. It
// parks in Go's network poller (see [sys.Waiter]) rather than in poll(2);
// where no epoll instance can be had, and when profiling itself, it uses
// poll(2).
func (s *Tracker) wait(timeout time.Duration) error {
	// A session profiling this process waits in poll(2): the program's
	// own goroutines may hold every P, and a reader parked in the poller
	// would run only when one is preempted (tens of milliseconds late),
	// by when the goroutine a sample names may have ended and its labels
	// with it. A thread blocked in poll(2) is woken by the kernel at once.
	if s.waiter == nil && !s.noWaiter && !s.self {
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
