//go:build linux

package main

import (
	"io"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform/linux"
)

// TestSIGKILLLosesAtMostTheFlushInterval kills a recording recorder with
// SIGKILL, as the OOM killer would, and reads what it left: every chunk
// but the one being built is on disk, so the newest sample in the file is
// at most the flush interval (200 ms) plus the ring read interval (50 ms)
// older than the kill. The bound asserted allows 250 ms more for this
// loaded machine's scheduling; the log gives the figure.
func TestSIGKILLLosesAtMostTheFlushInterval(t *testing.T) {
	if err := linux.Probe(); err != nil {
		testbuild.Skip(t, "perf_event_open: %v", err)
	}
	cli := buildCLI(t)
	work := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-fno-omit-frame-pointer", "-o", "{dir}/shrinkwrap", "{in0}"},
		Inputs: []string{"../../tracer/testdata/shrinkwrap.c"},
		Out:    "shrinkwrap",
	})
	out := t.TempDir() + "/killed.rawstack"
	rec := exec.Command(cli, "record", "-q", "-F", "999", "--unwind", "fp", "-o", out, "--", work, "30")
	rec.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-rec.Process.Pid, syscall.SIGKILL) // the workload
	time.Sleep(2 * time.Second)
	killedAt := sys.Monotonic()
	rec.Process.Signal(syscall.SIGKILL)
	rec.Wait()
	syscall.Kill(-rec.Process.Pid, syscall.SIGKILL)

	r, err := format.Open(out)
	if err != nil {
		t.Fatalf("the killed recorder's trace: %v", err)
	}
	defer r.Close()
	var last int64
	samples := 0
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Logf("end of the trace: %v", err) // a torn last chunk is allowed
			break
		}
		if ev.Kind == format.KindSample {
			samples++
			if ts, ok := ev.Time(); ok && ts > last {
				last = ts
			}
		}
	}
	if samples == 0 {
		t.Fatal("no samples in the trace of 2 s of recording")
	}
	lost := time.Duration(killedAt - last)
	t.Logf("%d samples; the newest is %v older than the SIGKILL", samples, lost)
	if lost > 500*time.Millisecond {
		t.Errorf("SIGKILL lost the last %v of samples; the flush interval (200 ms) and ring reads (50 ms) should bound it at 250 ms", lost)
	}
}
