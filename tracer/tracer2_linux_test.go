//go:build linux

package tracer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	sys "github.com/rawstack/rawstack/internal/unix"
)

// spinTid is the thread selfSpin last ran on.
var spinTid int

// selfSpin burns d of the calling thread's CPU time.
//
//go:noinline
func selfSpin(d time.Duration) uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	spinTid = sys.Gettid()
	x := uint64(1)
	for end := sys.ThreadCPUTime() + int64(d); sys.ThreadCPUTime() < end; {
		for i := 0; i < 1000000; i++ {
			x = x*6364136223846793005 + uint64(i)
		}
	}
	return x
}

func funcName(pc uint64) string {
	if f := runtime.FuncForPC(uintptr(pc)); f != nil {
		return f.Name()
	}
	return ""
}

func stackHas(pcs []uint64, suffix string) bool {
	for i, pc := range pcs {
		if i > 0 {
			pc--
		}
		if strings.HasSuffix(funcName(pc), suffix) {
			return true
		}
	}
	return false
}

func TestSelfProfile(t *testing.T) {
	needPerf(t)
	var out bytes.Buffer
	tr, err := Start(context.Background(), Options{Frequency: 999, Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	selfSpin(800 * time.Millisecond)
	if err := tr.Capture("after-spin"); err != nil {
		t.Fatal(err)
	}
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	d := readTrace(t, out.Bytes())
	pid := uint32(os.Getpid())
	// Count on the thread that spun: other threads (GC, the tracer's
	// reader) take their share of samples too, more so under -race.
	total, spin, all := 0, 0, 0
	for _, s := range d.samples {
		if s.Pid != pid {
			t.Fatalf("sample of pid %d in a self trace of %d", s.Pid, pid)
		}
		all++
		if s.Tid != uint32(spinTid) {
			continue
		}
		total++
		if stackHas(d.stacks[s.Stack], ".selfSpin") {
			spin++
		}
	}
	t.Logf("%d of %d samples of thread %d in selfSpin (%d samples in all); %d threads, %d modules, %d lost", spin, total, spinTid, all, len(d.threads), len(d.modules), len(d.lost))
	if total < 100 {
		t.Fatalf("only %d samples of the spinning thread in 0.8 s of its CPU time at 999 Hz", total)
	}
	if total > 1300 {
		t.Errorf("%d samples of the spinning thread for 0.8 s of CPU at 999 Hz: is it sampled twice?", total)
	}
	if frac := float64(spin) / float64(total); frac < 0.8 {
		t.Errorf("%.0f%% of the spinning thread's samples in selfSpin, want ≥ 80%%", 100*frac)
	}
	if len(d.markers) != 1 || d.strings[d.markers[0].Name] != "after-spin" || !stackHas(d.stacks[d.markers[0].Stack], ".TestSelfProfile") {
		t.Errorf("Capture marker missing or wrong: %+v", d.markers)
	}
	exe, _ := os.Executable()
	found := false
	for _, m := range d.modules {
		if m.Path == exe && m.GoBuildID != "" {
			found = true
		}
	}
	if !found {
		t.Errorf("no module for %s with a Go build id", exe)
	}
}

func TestHotJoin(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "chain", []string{"testdata/chain.c"}, "-O2", "-fno-omit-frame-pointer")
	var a, b bytes.Buffer
	tr, err := Start(context.Background(), Options{Frequency: 999, Command: exec.Command(bin, "0.8"), Streams: []io.Writer{&a}, ChunkSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); tr.Stats().Samples < 200; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no samples within 30 s")
		}
	}
	if err := tr.AddStream(&b); err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(tr.Pid())
	da, db := readTrace(t, a.Bytes()), readTrace(t, b.Bytes())
	if _, ok := db.procs[pid]; !ok || db.clock == 0 || len(db.threads) == 0 {
		t.Fatalf("joined stream lacks the snapshot: procs %v, clock syncs %d, threads %v", db.procs, db.clock, db.threads)
	}
	st := openSymtab(t, bin)
	good := 0
	for _, s := range db.samples {
		if hasChain(st, db, pid, bin, db.stacks[s.Stack]) {
			good++
		}
	}
	t.Logf("stream A %d samples, joined stream B %d samples, %d with the chain", len(da.samples), len(db.samples), good)
	if len(db.samples) < 50 || len(db.samples) >= len(da.samples) {
		t.Errorf("joined stream has %d samples, first stream %d", len(db.samples), len(da.samples))
	}
	if float64(good) < 0.95*float64(len(db.samples)) {
		t.Errorf("joined stream: only %d of %d samples resolve to main→a→b→c with its own modules", good, len(db.samples))
	}
}

// slowWriter blocks every write until released.
type slowWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	release chan struct{}
}

func (w *slowWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	w.n++
	if w.n > 2 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestBackpressure(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "chain", []string{"testdata/chain.c"}, "-O2", "-fno-omit-frame-pointer")
	var fast bytes.Buffer
	slow := &slowWriter{release: make(chan struct{})}
	tr, err := Start(context.Background(), Options{Frequency: 999, Command: exec.Command(bin, "1.0"),
		Streams: []io.Writer{&fast, slow, &failWriter{}}, ChunkSize: 256, StreamQueue: 4, FlushInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// The slow stream takes a few chunks after 300 and 600 samples (so
		// it falls behind, catches up, resyncs and falls behind again),
		// then everything once recording is done.
		for _, at := range []uint64{300, 600} {
			for tr.Stats().Samples < at {
				select {
				case <-tr.Done():
					close(slow.release)
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			for i := 0; i < 6; i++ {
				select {
				case slow.release <- struct{}{}:
				case <-tr.Done():
					close(slow.release)
					return
				}
			}
		}
		<-tr.Done()
		close(slow.release)
	}()
	err = tr.Wait()
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Wait = %v, want the failed stream's error", err)
	}
	total := int(tr.Stats().Samples)
	df := readTrace(t, fast.Bytes())
	ds := readTrace(t, slow.buf.Bytes())
	lostOf := func(d *trace) (n int) {
		for _, l := range d.lost {
			if l.Reason == format.LostBackpressure {
				n += int(l.Count)
			}
		}
		return n
	}
	lf, ls := lostOf(df), lostOf(ds)
	t.Logf("%d samples taken; fast stream %d + %d lost, slow stream %d + %d lost (stats %+v)", total, len(df.samples), lf, len(ds.samples), ls, tr.Stats())
	if len(df.samples) < total/2 {
		t.Errorf("fast stream got %d of %d samples: the slow stream held it back", len(df.samples), total)
	}
	if ls == 0 || len(ds.samples) == 0 {
		t.Errorf("slow stream: %d samples, %d reported lost; want both > 0", len(ds.samples), ls)
	}
	if len(ds.samples)+ls != total || len(df.samples)+lf != total {
		t.Errorf("samples + lost do not add up to the %d taken: fast %d+%d, slow %d+%d", total, len(df.samples), lf, len(ds.samples), ls)
	}
}

func TestThreads(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "threads", []string{"testdata/threads.c"}, "-O2", "-fno-omit-frame-pointer", "-pthread")
	var out bytes.Buffer
	tr, err := Start(context.Background(), Options{Frequency: 499, Command: exec.Command(bin, "0.4", "4"), Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	d := readTrace(t, out.Bytes())
	tids := map[uint32]int{}
	for _, s := range d.samples {
		tids[s.Tid]++
	}
	named := map[string]int{}
	for tid, name := range d.threads {
		if strings.HasPrefix(name, "worker-") {
			named[name]++
			if tids[tid] == 0 {
				t.Errorf("thread %d (%s) has no samples", tid, name)
			}
		}
	}
	t.Logf("threads %v, samples per thread %v", d.threads, tids)
	// worker-0's unnamed child inherits its name, as the kernel gives it:
	// no COMM record says so, the tracer must carry the creator's name.
	if len(named) != 4 || named["worker-0"] != 2 {
		t.Errorf("thread names %v, want worker-0..3 with worker-0 twice", named)
	}
	for tid := range tids {
		if d.threads[tid] == "" {
			t.Errorf("thread %d has samples but no name", tid)
		}
	}
}

func TestForkDlopen(t *testing.T) {
	needPerf(t)
	lib := testbuild.CC(t, "cc", "liblate.so", []string{"testdata/late.c"}, "-O2", "-fno-omit-frame-pointer", "-shared", "-fPIC")
	bin := testbuild.CC(t, "cc", "forkdl", []string{"testdata/forkdl.c"}, "-O2", "-fno-omit-frame-pointer", "-ldl")
	var out bytes.Buffer
	tr, err := Start(context.Background(), Options{Frequency: 499, Command: exec.Command(bin, lib), Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(tr.Pid())
	d := readTrace(t, out.Bytes())
	var child uint32
	for p, pr := range d.procs {
		if p != pid && pr.Ppid == pid {
			child = p
		}
	}
	if child == 0 {
		t.Fatalf("no forked child process in %v", d.procs)
	}
	inLate := map[uint32]int{}
	perPid := map[uint32]int{}
	for _, s := range d.samples {
		perPid[s.Pid]++
		pcs := d.stacks[s.Stack]
		if len(pcs) == 0 {
			continue
		}
		for _, m := range d.modules {
			if m.Pid == s.Pid && filepath.Base(m.Path) == "liblate.so" && pcs[0] >= m.Base && pcs[0] < m.Base+m.Size {
				inLate[s.Pid]++
				break
			}
		}
	}
	t.Logf("parent %d, child %d; samples per pid %v, in liblate.so %v", pid, child, perPid, inLate)
	if inLate[pid] < perPid[pid]/2 || inLate[child] < perPid[child]/2 || perPid[child] < 20 {
		t.Errorf("late module samples per pid %v of %v", inLate, perPid)
	}
	if !d.procEnds[child] || !d.procEnds[pid] {
		t.Errorf("ProcessEnd missing: %v", d.procEnds)
	}
}

func TestAttachPidExits(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "threads", []string{"testdata/threads.c"}, "-O2", "-fno-omit-frame-pointer", "-pthread")
	cmd := exec.Command(bin, "0.6", "2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", cmd.Process.Pid)); len(ents) >= 3 {
			break // the threads exist
		}
		if time.Now().After(deadline) {
			t.Fatal("fixture threads did not start")
		}
	}
	var out bytes.Buffer
	tr, err := Start(context.Background(), Options{Frequency: 499, Pid: cmd.Process.Pid, Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("tracer did not notice the target exit")
	}
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	<-waited
	d := readTrace(t, out.Bytes())
	tids := map[uint32]bool{}
	for _, s := range d.samples {
		tids[s.Tid] = true
	}
	t.Logf("%d samples from %d threads; threads %v", len(d.samples), len(tids), d.threads)
	if len(d.samples) < 50 || len(tids) < 3 {
		t.Errorf("%d samples from %d threads, want ≥ 50 from 3", len(d.samples), len(tids))
	}
	if !d.procEnds[uint32(cmd.Process.Pid)] {
		t.Errorf("no ProcessEnd for the exited target")
	}
}

func TestStoppedAndNotSelf(t *testing.T) {
	needPerf(t)
	tr, err := Start(context.Background(), Options{Pid: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Capture("x"); !errors.Is(err, ErrNotSelf) {
		t.Errorf("Capture on a PID tracer: %v, want ErrNotSelf", err)
	}
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := tr.AddStream(io.Discard); !errors.Is(err, ErrStopped) {
		t.Errorf("AddStream after Stop: %v, want ErrStopped", err)
	}
	if err := tr.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestForkExec records a shell that forks and execs the chain program: the
// child's new image must replace the modules it inherited.
func TestForkExec(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "chain", []string{"testdata/chain.c"}, "-O2", "-fno-omit-frame-pointer")
	sh, err := exec.LookPath("sh")
	if err != nil {
		testbuild.Skip(t, "no sh")
	}
	var out bytes.Buffer
	tr, err := Start(context.Background(), Options{Frequency: 999, Command: exec.Command(sh, "-c", bin+" 0.4; true"), Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	d := readTrace(t, out.Bytes())
	st := openSymtab(t, bin)
	var child uint32
	for p, pr := range d.procs {
		if pr.Name == "chain" {
			child = p
		}
	}
	if child == 0 || child == uint32(tr.Pid()) {
		t.Fatalf("no exec'd chain process among %v", d.procs)
	}
	total, good := 0, 0
	for _, s := range d.samples {
		if s.Pid == child {
			total++
			if hasChain(st, d, child, bin, d.stacks[s.Stack]) {
				good++
			}
		}
	}
	t.Logf("child %d: %d of %d samples hold main→a→b→c", child, good, total)
	if total < 100 || float64(good) < 0.9*float64(total) {
		t.Errorf("child %d: %d of %d samples hold main→a→b→c", child, good, total)
	}
}

func TestRemoveStream(t *testing.T) {
	needPerf(t)
	var a, b bytes.Buffer
	tr, err := Start(context.Background(), Options{Frequency: 999, Streams: []io.Writer{&a}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Stop()
	if err := tr.AddStream(&b); err != nil {
		t.Fatal(err)
	}
	selfSpin(200 * time.Millisecond)
	if err := tr.RemoveStream(&b); err != nil {
		t.Fatal(err)
	}
	n := b.Len()
	selfSpin(200 * time.Millisecond)
	if err := tr.RemoveStream(&b); err == nil {
		t.Error("removing a removed stream succeeded")
	}
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	if b.Len() != n {
		t.Errorf("removed stream grew from %d to %d bytes", n, b.Len())
	}
	da, db := readTrace(t, a.Bytes()), readTrace(t, b.Bytes())
	t.Logf("stream A %d samples, removed stream B %d", len(da.samples), len(db.samples))
	if len(db.samples) < 50 || len(da.samples) < len(db.samples)+50 {
		t.Errorf("stream A %d samples, removed stream B %d", len(da.samples), len(db.samples))
	}
}

func TestTruncatedFlag(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "deep", []string{"testdata/deep.c"}, "-O2", "-fno-omit-frame-pointer")
	max := 127
	if b, err := os.ReadFile("/proc/sys/kernel/perf_event_max_stack"); err == nil {
		fmt.Sscan(string(b), &max)
	}
	if max >= 1000 {
		testbuild.Skip(t, "kernel.perf_event_max_stack=%d: the fixture's 1000 frames fit", max)
	}
	var out bytes.Buffer
	tr, err := Start(context.Background(), Options{Frequency: 499, Command: exec.Command(bin, "0.3", "1000"), Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	d := readTrace(t, out.Bytes())
	trunc := 0
	for _, s := range d.samples {
		if s.Flags&format.SampleTruncated != 0 {
			trunc++
		}
	}
	t.Logf("%d of %d samples truncated (perf_event_max_stack=%d)", trunc, len(d.samples), max)
	if len(d.samples) < 50 || trunc < len(d.samples)*8/10 {
		t.Errorf("%d of %d samples flagged truncated, want ≥ 80%%", trunc, len(d.samples))
	}
}

// TestRustChain records a Rust program built with frame pointers and
// checks its samples hold main → spin_a → spin_b → spin_c.
func TestRustChain(t *testing.T) {
	needPerf(t)
	bin := buildRust(t, "chainrs", "chain.rs")
	var out bytes.Buffer
	tr, err := Start(context.Background(), Options{Frequency: 999, Command: exec.Command(bin, "0.5"), Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(tr.Pid())
	d := readTrace(t, out.Bytes())
	st := openSymtab(t, bin)
	want := []string{"spin_c", "spin_b", "spin_a", "_ZN5chain4main"}
	total, good := 0, 0
	for _, s := range d.samples {
		if s.Pid != pid {
			continue
		}
		total++
		pcs := d.stacks[s.Stack]
	next:
		for i := range pcs {
			for j, w := range want {
				if i+j >= len(pcs) {
					break next
				}
				pc := pcs[i+j]
				if i+j > 0 {
					pc--
				}
				if !strings.HasPrefix(st.lookup(d, pid, bin, pc), w) {
					continue next
				}
			}
			good++
			break
		}
	}
	if testing.Verbose() && len(d.samples) > 0 {
		for _, pc := range d.stacks[d.samples[len(d.samples)/2].Stack] {
			t.Logf("%#x %s", pc, st.lookup(d, pid, bin, pc-1))
		}
	}
	t.Logf("%d of %d samples hold main→spin_a→spin_b→spin_c", good, total)
	if total < 100 || float64(good) < 0.9*float64(total) {
		t.Errorf("%d of %d samples hold main→spin_a→spin_b→spin_c, want ≥ 90%%", good, total)
	}
}
