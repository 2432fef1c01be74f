//go:build linux

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/wine"
)

// foldedSum adds up the values of the folded lines whose stack holds
// chain (root first, ";"-separated).
func foldedSum(t *testing.T, folded, chain string) (in, all int64) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(folded), "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		n, err := strconv.ParseInt(l[i+1:], 10, 64)
		if err != nil {
			t.Fatalf("folded line %q: %v", l, err)
		}
		all += n
		if strings.Contains(";"+l[:i]+";", ";"+chain+";") {
			in += n
		}
	}
	return in, all
}

// TestRecordOffCPUUnderWine records, with the Windows build of rawstack
// under Wine, `record --off-cpu -p PID --duration 3s` of a program whose
// four threads are parked in worker → outer → middle → leaf_wait, and
// converts the trace on Linux with `convert --value offcpu` and no
// --debug-dir (the image and its PDB are where Wine ran them): that chain
// holds four threads × 3 s of off-CPU time, within 10%. Then `record --
// threads.exe` run from the fixture's directory says to write .\threads.exe.
func TestRecordOffCPUUnderWine(t *testing.T) {
	w := wine.Need(t)
	exe := buildWinThreads(t)
	rawstack := w.GoBuild(t, ".")
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	target := w.Command(ctx, exe, "4", "60", wine.Path(pidfile))
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()
	var pid string
	for deadline := time.Now().Add(time.Minute); pid == ""; time.Sleep(50 * time.Millisecond) {
		if b, _ := os.ReadFile(pidfile); strings.HasSuffix(string(b), "\n") {
			pid = strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatal("threads.exe wrote no pid")
		}
	}
	trace := filepath.Join(dir, "off.rawstack")
	out, err := w.Command(ctx, rawstack, "record", "-q", "--off-cpu", "-F", "100", "-p", pid, "--duration", "3s",
		"-o", wine.Path(trace)).CombinedOutput()
	if err != nil {
		t.Fatalf("wine rawstack.exe record --off-cpu -p %s: %v\n%s", pid, err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
	if !strings.Contains(string(out), "samples per CPU-second of 100 Hz asked") {
		t.Errorf("the summary gives no achieved rate")
	}
	var folded bytes.Buffer
	if err := runConvert([]string{trace, "--to", "folded", "--value", "offcpu", "--no-debuginfod"}, &folded, io.Discard); err != nil {
		t.Fatal(err)
	}
	in, all := foldedSum(t, folded.String(), "worker;outer;middle;leaf_wait")
	t.Logf("off CPU: %v in worker → outer → middle → leaf_wait, %v in all", time.Duration(in), time.Duration(all))
	if d := time.Duration(in); d < 10800*time.Millisecond || d > 13200*time.Millisecond {
		t.Errorf("%v off CPU in the parked chain, want 12s ± 10%%:\n%s", d, folded.String())
	}

	// A bare name found only in the current directory.
	cmd := w.Command(ctx, rawstack, "record", "-o", wine.Path(filepath.Join(dir, "dot.rawstack")), "--", "threads.exe", "1", "0", "-")
	cmd.Dir = filepath.Dir(exe)
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `write .\threads.exe`) {
		t.Errorf("record -- threads.exe from its directory: %v\n%s", err, out)
	}
}

// TestSelfProfileCPUUnderWine runs examples/selfprofile, built for Windows,
// under Wine with no flags but the trace's name, and reads the trace as a
// user would, with `convert --to pprof` (no --debug-dir: the image is
// where Wine ran it) and `go tool pprof`: its work, main.main →
// main.hashMany or main.sortMany, has ≥ 70% of the samples' CPU time, and the
// samples' CPU nanoseconds are the CPU time of one busy thread over the
// run: one CPU at most over the run's duration (what the host gave it,
// on a loaded host), no more than the CPU time Linux charged the whole
// Wine process and at least half of it.
func TestSelfProfileCPUUnderWine(t *testing.T) {
	w := wine.Need(t)
	exe := w.GoBuild(t, "../../examples/selfprofile")
	dir := t.TempDir()
	trace := filepath.Join(dir, "self.rawstack")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := w.Command(ctx, exe, "-o", wine.Path(trace))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("wine selfprofile.exe: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
	procCPU := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()

	// The trace's span, from its first sample to its last.
	r, err := format.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	first, last := int64(-1), int64(0)
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == format.KindSample {
			if first < 0 {
				first = ev.Sample.Time
			}
			last = max(last, ev.Sample.Time)
		}
	}
	r.Close()
	span := time.Duration(last - first)

	pb := filepath.Join(dir, "self.pb.gz")
	if err := runConvert([]string{trace, "--to", "pprof", "-o", pb, "--no-debuginfod"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=cpu", pb).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, top)
	}
	t.Logf("go tool pprof -top -sample_index=cpu:\n%s", firstLines(string(top), 12))
	f, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ci, ni := -1, -1
	for i, st := range p.SampleType {
		switch st.Type {
		case "cpu":
			ci = i
		case "samples":
			ni = i
		}
	}
	if ci < 0 || ni < 0 || p.SampleType[ci].Unit != "nanoseconds" {
		t.Fatalf("sample types %v", p.SampleType)
	}
	var n, work, cpu, workCPU int64
	for _, s := range p.Sample {
		var fns []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				fns = append(fns, ln.Function.Name)
			}
		}
		j := " " + strings.Join(fns, " ") + " "
		n += s.Value[ni]
		cpu += s.Value[ci]
		if strings.Contains(j, " main.main ") && (strings.Contains(j, " main.hashMany ") || strings.Contains(j, " main.sortMany ")) {
			work += s.Value[ni]
			workCPU += s.Value[ci]
		}
	}
	t.Logf("%d samples, %d (%.0f%%) in main.main → hashMany|sortMany with %v (%.0f%%) of the CPU; %v CPU in samples over %v (%.2f CPUs); Linux charged the Wine process %v",
		n, work, 100*float64(work)/float64(max(n, 1)), time.Duration(workCPU), 100*float64(workCPU)/float64(max(cpu, 1)),
		time.Duration(cpu), span, float64(cpu)/float64(max(span, 1)), procCPU)
	// The share is of CPU time, as -sample_index=cpu shows it: a runtime
	// thread that woke for a microsecond since the last tick is a sample
	// but no CPU, and on a loaded host such wake-ups are a varying part of
	// the count.
	if n == 0 || workCPU*10 < cpu*7 {
		t.Errorf("%v of %v CPU in samples shows the work (%d of %d samples), want ≥ 70%%", time.Duration(workCPU), time.Duration(cpu), work, n)
	}
	// One goroutine works; the runtime's other threads add little. On an
	// idle host that is one CPU; on a loaded one, what the host gave.
	if time.Duration(cpu) > span+span/10 || time.Duration(cpu) > procCPU {
		t.Errorf("%v CPU in samples over %v, with %v charged to the process", time.Duration(cpu), span, procCPU)
	}
	// Linux's figure holds Wine's start-up and the sampler's own
	// threads besides; it scales with the CPU the host gave, as the
	// samples' total does.
	if time.Duration(cpu) < procCPU/2 {
		t.Errorf("%v CPU in samples, %v charged to the process: the busy thread's time is missing", time.Duration(cpu), procCPU)
	}
}

func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	return strings.Join(l[:min(n, len(l))], "\n")
}
