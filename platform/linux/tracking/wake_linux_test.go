package tracking_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/internal/linuxtest"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// TestRunWokenByCancel: Run's wait ends when its context does, not when
// PollInterval (a whole-host session's is a second) next runs out, so
// that SIGTERM or --duration end a recording at once.
func TestRunWokenByCancel(t *testing.T) {
	s := tracking.New(platform.Config{Pid: os.Getpid()}, &linuxtest.CountHandler{})
	defer s.Close()
	s.PollInterval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	reads := 0
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, func() { reads++ }) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still waiting 10 s after its context ended (PollInterval 1 h)")
	}
	if reads == 0 {
		t.Fatal("Run returned without its last read")
	}
}
