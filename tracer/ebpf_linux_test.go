//go:build linux

package tracer

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
	_ "github.com/rawstack/rawstack/platform/linux/ebpf" // the eBPF back end's programs
	"github.com/rawstack/rawstack/symbolizer"
	_ "github.com/rawstack/rawstack/symbolizer/kallsyms" // kernel frames
)

// needBPF skips the test where the eBPF back end cannot run: a kernel
// without the features, or a user without CAP_BPF and CAP_PERFMON.
func needBPF(t testing.TB) {
	t.Helper()
	testbuild.Feature(t, linux.ProbeBPF())
}

// buildFixture builds a C fixture of testdata without frame pointers.
func buildFixture(t testing.TB, name string) string {
	t.Helper()
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-g", "-fomit-frame-pointer", "-o", "{dir}/" + name, "{in0}"},
		Inputs: []string{"testdata/" + name + ".c"},
		Out:    name,
	})
}

// recordBPF records cmd with the eBPF back end and returns the stream.
func recordBPF(t *testing.T, opts Options, cmd *exec.Cmd) []byte {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts.Backend = BackendEBPF
	opts.Unwind = UnwindDWARF
	opts.Command = cmd
	opts.Streams = []io.Writer{&out}
	tr, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	t.Logf("stats %+v", tr.Stats())
	return out.Bytes()
}

// symbolize builds the symbolized profile of a stream, kernel frames named
// from /proc/kallsyms.
func symbolize(t *testing.T, stream []byte) *symbolizer.Profile {
	t.Helper()
	r, err := format.NewReader(bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	p, err := symbolizer.Build(r, &symbolizer.Options{NoDebuginfod: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// names returns a profile sample's function names, leaf first, and how
// many of them are kernel frames.
func names(p *symbolizer.Profile, s *symbolizer.Sample) (fns []string, kernel int) {
	for _, li := range s.Locs {
		l := p.Locations[li]
		if l.Abs >= kernelStart {
			kernel++
		}
		fns = append(fns, l.FunctionName(0))
	}
	return fns, kernel
}

// TestEBPFChain: the eBPF back end copies registers and the top of the
// user stack in BPF and unwinds on the host with CFI, so a program built
// without frame pointers keeps main → a → … → leaf in at least 95% of the
// samples taken in leaf (the bar; DWARF mode of the perf back end
// reaches 99%). With UnwindFP the BPF program takes the kernel's
// frame-pointer walk instead, which the fixture defeats.
func TestEBPFChain(t *testing.T) {
	needBPF(t)
	bin := testbuild.CC(t, "cc", "dwarfchain", []string{"testdata/dwarfchain.c"}, "-O2", "-fomit-frame-pointer")
	for _, mode := range []UnwindMode{UnwindDWARF, UnwindFP} {
		inLeaf, good, total, _ := recordChain(t, bin, Options{Backend: BackendEBPF, Unwind: mode}, "0.5")
		if total < 150 || inLeaf < total/2 {
			t.Fatalf("%v: %d samples, %d in leaf, in 0.5 s of CPU at 1000 Hz", mode, total, inLeaf)
		}
		frac := float64(good) / float64(inLeaf)
		switch mode {
		case UnwindDWARF:
			if frac < 0.95 {
				t.Errorf("eBPF stack copies recover the chain in %.1f%% of leaf samples, want ≥ 95%%", 100*frac)
			}
		case UnwindFP:
			if frac >= 0.10 {
				t.Errorf("eBPF frame-pointer mode recovers the chain in %.1f%% of leaf samples; the fixture should defeat it", 100*frac)
			}
		}
	}
}

// TestEBPFKernelFrames records a program that lives in small system calls:
// most samples carry kernel frames (named from /proc/kallsyms: the system
// call entry) and, in the same stack, the user chain churn → main.
func TestEBPFKernelFrames(t *testing.T) {
	needBPF(t)
	// The kernel's entry from user mode: the syscall instruction's on
	// x86-64; on arm64 the vector of any exception from EL0 (el0t_64_sync
	// for svc and faults, el0t_64_irq for an interrupt, which an emulated
	// CPU takes often enough inside the program's short calls).
	entry := map[string]string{"amd64": "entry_SYSCALL_64", "arm64": "el0t_64_"}[runtime.GOARCH]
	if entry == "" {
		testbuild.Impossible(t, "amd64-only")
	}
	bin := buildFixture(t, "ebpf_sys")
	stream := recordBPF(t, Options{Frequency: 1000}, exec.Command(bin, "0.5"))
	p := symbolize(t, stream)
	var total, inKernel, good int64
	for _, s := range p.Samples {
		fns, nk := names(p, s)
		total += s.Count
		if nk == 0 {
			continue
		}
		inKernel += s.Count
		chain := strings.Join(fns, ";")
		if strings.Contains(strings.Join(fns[:nk], ";"), entry) && strings.Contains(chain, ";churn;main;") {
			good += s.Count
		}
	}
	t.Logf("%d samples, %d with kernel frames, %d of those with %s and churn → main", total, inKernel, good, entry)
	if total < 200 {
		t.Fatalf("only %d samples in 0.5 s at 1000 Hz", total)
	}
	if inKernel < total/3 {
		t.Errorf("%d of %d samples have kernel frames; the program lives in system calls", inKernel, total)
	}
	if float64(good) < 0.9*float64(inKernel) {
		t.Errorf("%d of %d kernel samples hold the system call entry and the user chain, want ≥ 90%%", good, inKernel)
	}
}

// TestEBPFOffCPU records a program that sleeps 5 × 200 ms in main →
// waiter → nap: the off-CPU weight of samples in that chain is within 10%
// of the sleep time the program measured itself.
func TestEBPFOffCPU(t *testing.T) {
	needBPF(t)
	bin := buildFixture(t, "ebpf_sleep")
	cmd := exec.Command(bin, "0.2", "5")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stream := recordBPF(t, Options{Frequency: 100, OffCPU: true}, cmd)
	slept, err := strconv.ParseInt(strings.TrimSpace(stdout.String()), 10, 64)
	if err != nil {
		t.Fatalf("fixture output %q: %v", stdout.String(), err)
	}
	p := symbolize(t, stream)
	var off, napOff int64
	var napCount int64
	for _, s := range p.Samples {
		off += s.OffCPUNanos
		if s.OffCPUNanos == 0 {
			continue
		}
		fns, nk := names(p, s)
		if strings.Contains(strings.Join(fns[nk:], ";"), "nap;waiter;main") {
			napOff += s.OffCPUNanos
			napCount += s.Count
		}
	}
	t.Logf("slept %v by the program's clock; off-CPU %v in nap → waiter → main (%d samples), %v in all", time.Duration(slept), time.Duration(napOff), napCount, time.Duration(off))
	if napCount < 5 {
		t.Fatalf("%d off-CPU samples in nap; the program slept 5 times", napCount)
	}
	if d := float64(napOff-slept) / float64(slept); d < -0.1 || d > 0.1 {
		t.Errorf("off-CPU weight in nap is %v, %.1f%% off the %v slept", time.Duration(napOff), 100*d, time.Duration(slept))
	}

	// Off-CPU samples reach the folded and pprof exports through the
	// profile's OffCPUNanos (cmd/rawstack tests the --value offcpu path).
}

// TestEBPFSystemWide records the whole system while two unrelated
// programs start and run: both appear, with their names and samples whose
// user frames name their functions (modules tracked for processes the
// recorder was not told about). It runs with the default stack copies,
// where the program built without frame pointers must keep its whole
// chain (unwound on the host with the lazy tables of whatever modules the
// host's samples pass through), and with --unwind fp.
func TestEBPFSystemWide(t *testing.T) {
	needBPF(t)
	chain := testbuild.CC(t, "cc", "dwarfchain", []string{"testdata/dwarfchain.c"}, "-O2", "-fomit-frame-pointer")
	fp := testbuild.CC(t, "cc", "chain", []string{"testdata/chain.c"}, "-O2", "-fno-omit-frame-pointer")
	for _, mode := range []UnwindMode{UnwindDWARF, UnwindFP} {
		systemWide(t, mode, chain, fp)
	}
}

func systemWide(t *testing.T, mode UnwindMode, chain, fp string) {
	var out bytes.Buffer
	tr, err := Start(context.Background(), Options{Backend: BackendEBPF, Unwind: mode, System: true, Frequency: 200, Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := exec.Command(chain, "0.4"), exec.Command(fp, "0.4")
	var wg sync.WaitGroup
	for _, c := range []*exec.Cmd{a, b} {
		if err := c.Start(); err != nil {
			tr.Stop()
			t.Fatal(err)
		}
		wg.Add(1)
		go func(c *exec.Cmd) { defer wg.Done(); c.Wait() }(c)
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	d := readTrace(t, out.Bytes())
	stA, stB := openSymtab(t, chain), openSymtab(t, fp)
	pa, pb := uint32(a.Process.Pid), uint32(b.Process.Pid)
	var na, nb, leafA, chainA, chainB int
	pids := map[uint32]bool{}
	for _, s := range d.samples {
		pids[s.Pid] = true
		pcs := userFrames(d.stacks[s.Stack])
		switch s.Pid {
		case pa:
			na++
			if len(pcs) > 0 && stA.lookup(d, pa, chain, pcs[0]) == "leaf" {
				leafA++
				if chainFrom(stA, d, pa, chain, pcs, deepChain) {
					chainA++
				}
			}
		case pb:
			nb++
			if hasChain(stB, d, pb, fp, pcs) {
				chainB++
			}
		}
	}
	t.Logf("%v: %d processes sampled; dwarfchain (pid %d, %q): %d samples, %d in leaf, %d with the whole chain; chain (pid %d, %q): %d samples, %d with main → a → b → c; %d lost events; stats %+v",
		mode, len(pids), pa, d.procs[pa].Name, na, leafA, chainA, pb, d.procs[pb].Name, nb, chainB, len(d.lost), tr.Stats())
	if d.procs[pa].Name != "dwarfchain" || d.procs[pb].Name != "chain" {
		t.Errorf("%v: process names %q and %q, want dwarfchain and chain", mode, d.procs[pa].Name, d.procs[pb].Name)
	}
	if na < 30 || nb < 30 {
		t.Fatalf("%v: %d and %d samples of the two programs, each ran 0.4 s of CPU at 200 Hz", mode, na, nb)
	}
	if leafA < na/2 || chainB < nb*9/10 {
		t.Errorf("%v: user frames not named: %d of %d dwarfchain samples in leaf, %d of %d chain samples with main → a → b → c", mode, leafA, na, chainB, nb)
	}
	if mode == UnwindDWARF && chainA < leafA*95/100 {
		t.Errorf("%v: %d of %d dwarfchain samples in leaf keep main → … → leaf, want ≥ 95%%", mode, chainA, leafA)
	}
}

// TestEBPFExecExit records a program whose children exit and exec while
// it runs: the exiting child's samples and ProcessEnd, the exec'ing
// child's samples before (pre_exec, in the parent's image) and after
// (leaf, in the new image) the exec.
func TestEBPFExecExit(t *testing.T) {
	needBPF(t)
	bin := buildFixture(t, "ebpf_execexit")
	chain := testbuild.CC(t, "cc", "dwarfchain", []string{"testdata/dwarfchain.c"}, "-O2", "-fomit-frame-pointer")
	stream := recordBPF(t, Options{Frequency: 500}, exec.Command(bin, chain, "0.3"))
	d := readTrace(t, stream)
	stBin, stChain := openSymtab(t, bin), openSymtab(t, chain)
	count := map[string]map[uint32]int{}
	for _, s := range d.samples {
		pcs := userFrames(d.stacks[s.Stack])
		if len(pcs) == 0 {
			continue
		}
		fn := stBin.lookup(d, s.Pid, bin, pcs[0])
		if fn == "" {
			fn = stChain.lookup(d, s.Pid, chain, pcs[0])
		}
		if count[fn] == nil {
			count[fn] = map[uint32]int{}
		}
		count[fn][s.Pid]++
	}
	t.Logf("samples by leaf function and pid: %v; processes ended: %v", count, d.procEnds)
	one := func(fn string) (uint32, int) {
		if len(count[fn]) != 1 {
			t.Fatalf("samples in %s come from %d processes, want 1: %v", fn, len(count[fn]), count[fn])
		}
		for pid, n := range count[fn] {
			return pid, n
		}
		return 0, 0
	}
	parent, np := one("parent_spin")
	exiter, ne := one("child_spin")
	execer, nx := one("pre_exec")
	after, nl := one("leaf")
	if np < 100 || ne < 50 || nx < 30 || nl < 50 {
		t.Errorf("too few samples: parent_spin %d, child_spin %d, pre_exec %d, leaf after exec %d", np, ne, nx, nl)
	}
	if parent == exiter || parent == execer || exiter == execer {
		t.Errorf("parent %d, exiting child %d and exec'ing child %d should differ", parent, exiter, execer)
	}
	if after != execer {
		t.Errorf("leaf samples (after exec) from pid %d, pre_exec samples from pid %d: the same process", after, execer)
	}
	if !d.procEnds[exiter] {
		t.Errorf("no ProcessEnd for the child that exited (pid %d)", exiter)
	}
	if d.procs[execer].Name != "dwarfchain" {
		t.Errorf("exec'ing child's last Process name is %q, want dwarfchain", d.procs[execer].Name)
	}
}
