//go:build linux

package tracer

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestManyShortThreads records a program that creates and joins 20,000
// short-lived threads and checks that every one is accounted for: each
// has a ThreadStart and a ThreadEnd in the trace, or the trace says, with
// Lost events, how many records the kernel dropped; nothing goes missing
// silently.
func TestManyShortThreads(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "manythreads", []string{"testdata/manythreads.c"}, "-O2", "-pthread")
	const n = 20000
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	tr, err := Start(ctx, Options{Frequency: 999, Command: exec.Command(bin, "20000"), Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	pid := uint32(tr.Pid())
	r, err := format.NewReader(&out)
	if err != nil {
		t.Fatal(err)
	}
	started, ended := map[uint32]bool{}, map[uint32]bool{}
	var lost uint64
	samples := 0
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case format.KindThreadStart:
			if ev.ThreadStart.Pid == pid {
				started[ev.ThreadStart.Tid] = true
			}
		case format.KindThreadEnd:
			if ev.ThreadEnd.Pid == pid {
				ended[ev.ThreadEnd.Tid] = true
			}
		case format.KindLost:
			lost += ev.Lost.Count
		case format.KindSample:
			samples++
		}
	}
	workers := len(started) - 1 // the main thread
	t.Logf("%d threads started, %d ended, %d lost records/samples, %d samples; stats %+v", len(started), len(ended), lost, samples, tr.Stats())
	if workers < n && lost == 0 {
		t.Errorf("%d of %d threads have no ThreadStart and nothing was reported lost", n-workers, n)
	}
	for tid := range started {
		if tid != pid && !ended[tid] && lost == 0 {
			t.Errorf("thread %d started and never ended, and nothing was reported lost", tid)
			break
		}
	}
	if workers+int(lost) < n {
		t.Errorf("%d threads started plus %d reported lost < %d created", workers, lost, n)
	}
}
