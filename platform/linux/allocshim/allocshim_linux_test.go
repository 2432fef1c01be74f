//go:build linux && (amd64 || arm64)

package allocshim

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	sys "github.com/rawstack/rawstack/internal/unix"
)

// TestObjectCurrent: the committed objects, x86-64's and arm64's, are
// what build.sh makes of shim.c with this machine's clang and linkers
// (CI's are the ones they were built with).
func TestObjectCurrent(t *testing.T) {
	testbuild.NeedAll(t, "rebuilding the allocation sampler", "clang", "llvm-strip", "ld", "aarch64-linux-gnu-ld")
	dir := t.TempDir()
	outs := []string{filepath.Join(dir, "shim.so"), filepath.Join(dir, "shim-arm64.so")}
	if b, err := exec.Command("sh", "src/build.sh", outs[0], outs[1]).CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	for i, committed := range []string{"src/librawstack-alloc.so", "src/librawstack-alloc-arm64.so"} {
		got, err := os.ReadFile(outs[i])
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(committed)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s (%d bytes) is not what build.sh makes of shim.c (%d bytes): run go generate ./platform/linux/allocshim", committed, len(want), len(got))
		}
	}
	own := map[string]string{"amd64": "src/librawstack-alloc.so", "arm64": "src/librawstack-alloc-arm64.so"}[runtime.GOARCH]
	if b, err := os.ReadFile(own); Built && (err != nil || !bytes.Equal(Object, b)) {
		t.Errorf("Object is not %s, this architecture's committed object (%v)", own, err)
	}
}

// sampledProgram builds testdata/sampled.c and installs the sampler:
// the program's and the sampler's paths.
func sampledProgram(t *testing.T) (bin, so string) {
	bin = testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-pthread", "-rdynamic", "-o", "{dir}/sampled", "{in0}", "-lm"},
		Inputs: []string{"testdata/sampled.c"},
		Out:    "sampled",
	})
	so, err := Install("")
	if err != nil {
		t.Fatal(err)
	}
	return bin, so
}

// markerLine is a line of sampled.c's output: what its own markers were
// told, unbiased, for one process.
type markerLine struct {
	who         string
	alloc, live float64 // bytes allocated and kept
	bad, n      int     // frees of blocks not reported, allocations
}

// markerLines parses sampled.c's output: a parent and a child line.
func markerLines(t *testing.T, out []byte) []markerLine {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("output %q, want a parent and a child line", out)
	}
	var ms []markerLine
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 5 {
			t.Fatalf("line %q", l)
		}
		m := markerLine{who: f[0]}
		m.alloc, _ = strconv.ParseFloat(f[1], 64)
		m.live, _ = strconv.ParseFloat(f[2], 64)
		m.bad, _ = strconv.Atoi(f[3])
		m.n, _ = strconv.Atoi(f[4])
		ms = append(ms, m)
	}
	return ms
}

// TestSampling runs testdata/sampled.c under the sampler, with the
// markers defined by the program: what they report, unbiased as the
// recorder does, gives the bytes allocated and kept ±15%, in four
// threads and again in a forked child, and no free of a block that was
// not reported.
func TestSampling(t *testing.T) {
	bin, so := sampledProgram(t)
	const rate = 64 << 10
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+so, RateEnv+"="+strconv.Itoa(rate))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	for _, m := range markerLines(t, out) {
		t.Logf("%s: %d samples, allocated %.1f MiB (want %.1f), kept %.1f MiB (want %.1f), frees of unreported blocks %d",
			m.who, m.n, m.alloc/(1<<20), float64(sampledAlloc)/(1<<20), m.live/(1<<20), float64(sampledLive)/(1<<20), m.bad)
		for _, c := range []struct {
			what      string
			got, want float64
		}{{"allocated", m.alloc, sampledAlloc}, {"kept", m.live, sampledLive}} {
			if c.got < 0.85*c.want || c.got > 1.15*c.want {
				t.Errorf("%s: %s %.0f bytes, want %.0f ±15%%", m.who, c.what, c.got, c.want)
			}
		}
		if m.bad != 0 {
			t.Errorf("%s: %d frees reported of blocks never reported allocated", m.who, m.bad)
		}
	}
}

// TestInstall: the installed object is Object, readable by all, found
// again by a second Install; a directory other users can write to is
// refused, and a file there that is not Object is replaced.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	p, err := Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(b, Object) {
		t.Fatalf("%s: %v, or not Object", p, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: mode %v, want 0644", p, fi.Mode())
	}
	os.WriteFile(p, []byte("not the sampler"), 0o644)
	if p2, err := Install(dir); err != nil || p2 != p {
		t.Fatalf("second Install: %s, %v; want %s", p2, err, p)
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, Object) {
		t.Errorf("a file that was not Object was kept")
	}
	os.Chmod(dir, 0o777)
	if _, err := Install(dir); err == nil {
		t.Errorf("Install into a directory writable by all: no error")
	} else {
		t.Log(err)
	}
}

// ringProc is what a process's ring records say: bytes allocated and
// kept (unbiased), its sampled blocks, allocations, and frees of blocks
// the ring never reported.
type ringProc struct {
	alloc, live float64
	blocks      map[uint64]float64
	n, bad      int
}

// ringReader checks and sums a ring's records as the recorder reads them.
type ringReader struct {
	t          *testing.T
	ring       *Ring
	rate       float64
	stackBytes int
	procs      map[uint32]*ringProc
	last       uint64
	pending    []byte // an allocation's header, until its block
}

// read reads every record written so far.
func (rr *ringReader) read() {
	t, le := rr.t, binary.LittleEndian
	for {
		rec, ok, err := rr.ring.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
		kind, pid, tid, tm, w := le.Uint32(rec), le.Uint32(rec[4:]), le.Uint32(rec[8:]), le.Uint64(rec[16:]), le.Uint64(rec[24:])
		if tm < rr.last {
			t.Fatalf("record at %d after one at %d", tm, rr.last)
		}
		rr.last = tm
		p := rr.procs[pid]
		if p == nil {
			p = &ringProc{blocks: map[uint64]float64{}}
			rr.procs[pid] = p
		}
		pending := rr.pending
		switch {
		case pending != nil && (kind != 5 || le.Uint32(pending[8:]) != tid || le.Uint64(pending[16:]) != tm || w == 0):
			t.Fatalf("allocation of tid %d at %d followed by a record of kind %d, tid %d, time %d, block %#x", le.Uint32(pending[8:]), le.Uint64(pending[16:]), kind, tid, tm, w)
		case kind == 4:
			flags, stack := le.Uint16(rec[36:]), int(le.Uint32(rec[40:]))
			if flags != 1 || stack%8 != 0 || stack < 8 || stack > rr.stackBytes || len(rec) != 48+captureRegs*8+stack {
				t.Fatalf("allocation record of %d bytes: flags %#x, %d stack bytes", len(rec), flags, stack)
			}
			ip, ret := captureReturn(rec[48:])
			if d := int64(ret - ip); d < -1<<16 || d > 1<<16 {
				t.Fatalf("allocation at rawstack_capture %#x returns to %#x, not in the sampler", ip, ret)
			}
			rr.pending = append(pending[:0], rec[:48]...)
		case kind == 5 && pending != nil:
			size := float64(le.Uint64(pending[24:]))
			wt := size / -math.Expm1(-size/rr.rate)
			p.alloc += wt
			p.live += wt
			p.blocks[w] = wt
			p.n++
			rr.pending = nil
		case kind == 6 && len(rec) == 48:
			if wt, ok := p.blocks[w]; ok {
				p.live -= wt
				delete(p.blocks, w)
			} else {
				p.bad++
			}
		default:
			t.Fatalf("record of kind %d, %d bytes", kind, len(rec))
		}
		rr.ring.Advance()
	}
}

// runRing runs sampled.c with a ring of ringBytes, read every
// millisecond while it runs unless noRead, and returns what the
// program's markers were told and the ring's reader.
func runRing(t *testing.T, ringBytes int, noRead bool) ([]markerLine, *ringReader) {
	bin, so := sampledProgram(t)
	const rate, stackBytes = 128 << 10, 8192
	ring, err := CreateRing(t.TempDir(), ringBytes, stackBytes, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ring.Close() })
	var out bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+so, RateEnv+"="+strconv.Itoa(rate), RingEnv+"="+ring.Path())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	rr := &ringReader{t: t, ring: ring, rate: rate, stackBytes: stackBytes, procs: map[uint32]*ringProc{}}
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v\n%s", bin, err, out.String())
			}
			running = false
		case <-time.After(time.Millisecond):
		}
		ring.Stamp(sys.Monotonic())
		if !running || !noRead {
			rr.read()
		}
	}
	return markerLines(t, out.Bytes()), rr
}

// sampledWant is what each process of sampled.c allocates and keeps:
// each of 4 threads 65536 blocks of 4 KiB, a fifth of them reallocated
// from 2 KiB (counted as both), an eighth kept, and an array of 8192
// pointers kept.
const sampledAlloc, sampledLive = 4 * (65536*4096*11/10 + 8192*8), 4 * (8192*4096 + 8192*8)

// TestRing runs testdata/sampled.c under the sampler with a shared ring,
// read while it runs as the recorder reads it: every sampled allocation
// and free of the parent and of its forked child comes through the ring
// (the program's markers see none), in time order; each allocation is a
// record with the registers at rawstack_capture and the stack above
// them (its return address in the sampler, next to it), followed by its
// block; no free is of a block not reported; and, unbiased, the records
// give the bytes each process allocated and kept ±15%.
func TestRing(t *testing.T) {
	lines, rr := runRing(t, 64<<20, false) // the whole run: nothing spilled however slow this reader
	if sp, ls := rr.ring.Counts(); sp != 0 || ls != 0 {
		t.Errorf("%d records sent to the markers, %d allocations lost (set full)", sp, ls)
	}
	for _, m := range lines {
		if m.n != 0 {
			t.Errorf("%s: the program's markers were told of %d allocations with the ring there", m.who, m.n)
		}
	}
	if len(rr.procs) != 2 {
		t.Fatalf("records of %d processes, want a parent and a child", len(rr.procs))
	}
	for pid, p := range rr.procs {
		t.Logf("pid %d: %d samples, allocated %.1f MiB (want %.1f), kept %.1f MiB (want %.1f), frees of unreported blocks %d",
			pid, p.n, p.alloc/(1<<20), float64(sampledAlloc)/(1<<20), p.live/(1<<20), float64(sampledLive)/(1<<20), p.bad)
		if p.alloc < 0.85*sampledAlloc || p.alloc > 1.15*sampledAlloc || p.live < 0.85*sampledLive || p.live > 1.15*sampledLive {
			t.Errorf("pid %d: allocated %.0f, kept %.0f bytes; want %d and %d ±15%%", pid, p.alloc, p.live, sampledAlloc, sampledLive)
		}
		if p.bad != 0 {
			t.Errorf("pid %d: %d frees of blocks never reported", pid, p.bad)
		}
	}
}

// TestRingSpill: a ring nobody reads while the program runs (a recorder
// starved of CPU) fills, and then every record goes to the markers
// instead, none lost: what the ring holds and what the program's
// markers saw add up to the bytes each process allocated ±15%, and the
// markers saw no more frees of blocks they were not told of than the
// ring holds allocations.
func TestRingSpill(t *testing.T) {
	lines, rr := runRing(t, 1<<16, true)
	spilled, lostSet := rr.ring.Counts()
	if spilled == 0 || lostSet != 0 {
		t.Fatalf("%d records sent to the markers, %d lost (set full); want some and none", spilled, lostSet)
	}
	var ringN int
	var ringAlloc float64
	for _, p := range rr.procs {
		ringN += p.n
		ringAlloc += p.alloc
	}
	var markerN, bad int
	var markerAlloc float64
	for _, m := range lines {
		markerAlloc += m.alloc
		markerN += m.n
		bad += m.bad
	}
	total := ringAlloc + markerAlloc
	t.Logf("%d allocations in the ring (%.1f MiB), %d through the markers (%.1f MiB), %d records spilled; %.1f MiB allocated in all, want %.1f",
		ringN, ringAlloc/(1<<20), markerN, markerAlloc/(1<<20), spilled, total/(1<<20), 2*float64(sampledAlloc)/(1<<20))
	if ringN == 0 || markerN == 0 {
		t.Errorf("%d allocations in the ring and %d through the markers: want both", ringN, markerN)
	}
	if total < 0.85*2*sampledAlloc || total > 1.15*2*sampledAlloc {
		t.Errorf("%.0f bytes allocated in the ring and through the markers, want %d ±15%%", total, 2*sampledAlloc)
	}
	if bad > ringN {
		t.Errorf("the markers saw %d frees of blocks they were not told of, more than the ring's %d allocations", bad, ringN)
	}
}

// TestRingFile: the ring's file can be opened by this user only and is
// gone after Close; one a killed recorder left behind is removed by the
// next CreateRing, one of a recorder still running is not.
func TestRingFile(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "alloc-ring-"+strconv.Itoa(dead.Process.Pid)+"-1")
	live := filepath.Join(dir, "alloc-ring-"+strconv.Itoa(os.Getppid())+"-1")
	for _, p := range []string{stale, live} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r, err := CreateRing(dir, 1<<16, 1024, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(r.Path()); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != RingHeader+1<<16 {
		t.Errorf("%s: %v, %v; want 0600 and %d bytes", r.Path(), err, fi, RingHeader+1<<16)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the ring of exited pid %d is still there (%v)", dead.Process.Pid, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the ring of running pid %d was removed: %v", os.Getppid(), err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Path()); !os.IsNotExist(err) {
		t.Errorf("%s still there after Close (%v)", r.Path(), err)
	}
}

// TestRingOtherPidNamespace: a process in another pid namespace than
// the ring's recorder (here sampled.c run by unshare --pid --fork) would
// write pids the recorder cannot place; it leaves the ring alone and
// reports through the markers, which in the program add up to what it
// allocated.
func TestRingOtherPidNamespace(t *testing.T) {
	testbuild.Need(t, "unshare", "runs the program in a new pid namespace (util-linux)")
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "unshare --pid needs root")
	}
	bin, so := sampledProgram(t)
	ring, err := CreateRing(t.TempDir(), 64<<20, 8192, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	const rate = 128 << 10
	cmd := exec.Command("unshare", "--pid", "--fork", bin)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+so, RateEnv+"="+strconv.Itoa(rate), RingEnv+"="+ring.Path())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unshare --pid --fork %s: %v\n%s", bin, err, out)
	}
	rr := &ringReader{t: t, ring: ring, rate: rate, stackBytes: 8192, procs: map[uint32]*ringProc{}}
	rr.read()
	for _, m := range markerLines(t, out) {
		t.Logf("%s: %d samples through the markers, %.1f MiB allocated (want %.1f)", m.who, m.n, m.alloc/(1<<20), float64(sampledAlloc)/(1<<20))
		if m.alloc < 0.85*sampledAlloc || m.alloc > 1.15*sampledAlloc {
			t.Errorf("%s: the markers saw %.0f bytes allocated, want %d ±15%% (the rest went into the ring?)", m.who, m.alloc, sampledAlloc)
		}
	}
	for pid, p := range rr.procs {
		t.Logf("ring: pid %d, %d allocations (unshare itself)", pid, p.n)
	}
}

// captureRegs is the registers rawstack_capture stores (BPF's order:
// tracking.SampleNRegs, which this package's tests cannot import).
var captureRegs = map[string]int{"amd64": 17, "arm64": 33}[runtime.GOARCH]

// captureReturn returns an allocation record's instruction pointer (at
// rawstack_capture) and its return address: on x86-64 the word at the
// stack pointer, the stack copy's first; on arm64 the link register x30.
func captureReturn(regsAndStack []byte) (ip, ret uint64) {
	le := binary.LittleEndian
	if runtime.GOARCH == "arm64" {
		return le.Uint64(regsAndStack[32*8:]), le.Uint64(regsAndStack[30*8:])
	}
	return le.Uint64(regsAndStack[8*8:]), le.Uint64(regsAndStack[17*8:])
}
