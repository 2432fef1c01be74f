//go:build linux && amd64

package allocshim

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	sys "github.com/rawstack/rawstack/internal/unix"
)

// startRate builds testdata/allocrate.c (with extra cc args) and starts
// it with threads spinning threads under the command prefix (unshare
// ..., or none).
func startRate(t *testing.T, name string, threads int, prefix []string, ccArgs ...string) *testbuild.Service {
	t.Helper()
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   append([]string{"-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", "{dir}/" + name, "{in0}"}, ccArgs...),
		Inputs: []string{"testdata/allocrate.c"},
		Out:    name,
	})
	return testbuild.StartService(t, "ready", append(append([]string{}, prefix...), bin, strconv.Itoa(threads))...)
}

// TestInject injects the sampler into allocrate.c while its threads
// allocate flat out and reads the ring as a recorder would: the main
// thread's churn and keep come out at their sizes ±15%, the threads'
// blocks stay whole, a clean detach makes the sampler write nothing
// more, and a second attach (the sampler already loaded) works again
// until the ring goes unstamped, when the sampler goes inert by itself.
func TestInject(t *testing.T) {
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "injecting through ptrace into another process needs root (or CAP_SYS_PTRACE)")
	}
	s := startRate(t, "allocrate", 2, nil)
	const rate = 512 << 10
	pid := s.Pid()
	dir, err := DirFor(pid)
	if err != nil {
		t.Fatal(err)
	}
	attach := func() (*Injection, *ringReader) {
		ring, err := CreateRing(dir.Host, 8<<20, 8192, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ring.Close() })
		in, err := Inject(pid, InjectConfig{Dir: dir, Rate: rate, Ring: ring})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("injected: %d slots, ring %v, loader hooked %v, thread held %v", in.Slots, in.Ringed, in.Hooked, in.Elapsed)
		if in.Slots == 0 || !in.Ringed {
			t.Fatalf("injected with %d slots redirected, ring mapped %v", in.Slots, in.Ringed)
		}
		return in, &ringReader{t: t, ring: ring, rate: rate, stackBytes: 8192, procs: map[uint32]*ringProc{}}
	}
	// read reads the ring while cmd runs in the service.
	read := func(rr *ringReader, cmd string) string {
		done := make(chan string, 1)
		go func() { done <- s.Do(cmd) }()
		for {
			rr.ring.Stamp(sys.Monotonic())
			rr.read()
			select {
			case line := <-done:
				rr.read()
				return line
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	base := s.Do("rate 400")
	in, rr := attach()
	t.Logf("attached: %s", read(rr, "rate 400"))
	if got := read(rr, "go"); got != "done" {
		t.Fatalf("go: %q", got)
	}
	if got := read(rr, "check"); got != "ok" {
		t.Fatalf("check: %q", got)
	}
	p := rr.procs[uint32(pid)]
	if p == nil {
		t.Fatalf("no records of pid %d in the ring: %v", pid, rr.procs)
	}
	// The spinning threads allocate too (about 2 KiB a round): what the
	// ring holds is at least churn and keep, and kept blocks stay.
	t.Logf("%d allocations sampled, %.1f MiB allocated, %.1f MiB live, %d frees of unreported blocks", p.n, p.alloc/(1<<20), p.live/(1<<20), p.bad)
	if p.alloc < 0.85*(1<<30+128<<20) {
		t.Errorf("%.1f MiB allocated, want at least churn's and keep's 1152 MiB ±15%%", p.alloc/(1<<20))
	}
	if p.live < 0.85*(128<<20) || p.live > 1.15*(128<<20)+64<<10 {
		t.Errorf("%.1f MiB live, want keep's 128 ±15%%", p.live/(1<<20))
	}
	if p.bad != 0 {
		t.Errorf("%d frees of blocks the ring never reported (frees of blocks allocated before the attach must be ignored)", p.bad)
	}
	rr.ring.Detach()
	if err := in.Detach(); err != nil {
		t.Fatal(err)
	}
	t.Logf("detached: %d slots restored; %s before, %s after", in.Restored, base, s.Do("rate 400"))
	if in.Restored != in.Slots {
		t.Errorf("%d slots restored of %d", in.Restored, in.Slots)
	}
	// What the ring holds from before the detach (records not read yet,
	// and those of calls that entered the sampler before their slot was
	// put back and finished after) is not "after": read it first.
	time.Sleep(10 * time.Millisecond)
	rr.read()
	n := p.n
	read(rr, "free")
	read(rr, "go")
	if p.n != n {
		t.Errorf("%d allocations sampled after a clean detach", p.n-n)
	}
	// Again, into the sampler already loaded; this time the recorder
	// "dies": nobody stamps the ring.
	in, rr = attach()
	read(rr, "rate 200")
	if rr.procs[uint32(pid)] == nil {
		t.Fatal("no records after the second attach")
	}
	time.Sleep(AliveTimeout + 500*time.Millisecond)
	s.Do("rate 300") // the threads' next sampled allocation finds the ring stale
	if d := rr.ring.Detached(); d != DetachSilent {
		t.Errorf("ring's detached word %d after %v unstamped, want %d", d, AliveTimeout, DetachSilent)
	}
	rr.read()
	n = rr.procs[uint32(pid)].n
	read(rr, "free")
	read(rr, "go")
	if got := rr.procs[uint32(pid)].n; got != n {
		t.Errorf("%d allocations sampled after the sampler went inert", got-n)
	}
	if got := s.Do("check"); got != "ok" {
		t.Fatalf("check: %q", got)
	}
}
