//go:build linux

package jit

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rawstack/rawstack/platform"
)

// TestJITTrackerOnDemand covers whole-host tracking: processes are not
// tracked when they appear, a missing perf map is looked for less and less
// often, and a map that appears meanwhile is still read at exit.
func TestJITTrackerOnDemand(t *testing.T) {
	pid := uint32(os.Getpid())
	path := fmt.Sprintf("/tmp/perf-%d.map", pid)
	os.Remove(path)
	t.Cleanup(func() { os.Remove(path) })
	rec := &jitRecorder{}
	j := New(platform.Config{}, rec)
	j.OnDemand = true
	defer j.Close()
	j.Started(pid)
	if len(j.procs) != 0 {
		t.Fatal("a process was tracked before its first sample")
	}
	j.Track(pid) // its first sample
	poll := func() { j.lastPoll = time.Time{}; j.Poll() }
	poll() // no map: backs off
	f := &j.procs[pid].perfMap
	if f.backoff != jitPollInterval || !f.retry.After(time.Now()) {
		t.Fatalf("after a poll without a map: backoff %v, retry in %v", f.backoff, time.Until(f.retry))
	}
	if err := os.WriteFile(path, []byte("1000 10 late\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	poll() // within the backoff: not looked at
	if got := rec.names(); got != "" {
		t.Fatalf("read during the backoff: %s", got)
	}
	f.retry = time.Time{}
	poll()
	if got := rec.names(); got != "late@0x1000" {
		t.Fatalf("after the backoff: %q", got)
	}
	// At exit the map is read whatever the backoff.
	os.Remove(path)
	j.Track(pid + 1<<20) // a pid that does not exist: no map, backs off
	p := j.procs[pid+1<<20]
	p.perfMap.retry = time.Now().Add(time.Hour)
	p.root, p.perfMap.rel = "", path
	os.WriteFile(path, []byte("2000 20 at exit\n"), 0o644)
	j.Exit(pid + 1<<20)
	if got := rec.names(); got != "late@0x1000,at exit@0x2000" {
		t.Fatalf("at exit: %q", got)
	}
}
