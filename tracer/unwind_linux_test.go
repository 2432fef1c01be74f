//go:build linux

package tracer

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	_ "github.com/rawstack/rawstack/symbolizer/elfsrc" // ELF symbol tables
)

// deepChain is dwarfchain.c's call chain, leaf first.
var deepChain = []string{"leaf", "e", "d", "c", "b", "a", "main"}

const kernelStart = 0xffff800000000000

// userFrames drops the kernel frames at the top of a stack.
func userFrames(pcs []uint64) []uint64 {
	for len(pcs) > 0 && pcs[0] >= kernelStart {
		pcs = pcs[1:]
	}
	return pcs
}

// chainFrom reports whether user frames pcs start with want, looking each
// caller up at its return address minus one.
func chainFrom(st *symtab, tr *trace, pid uint32, path string, pcs []uint64, want []string) bool {
	if len(pcs) < len(want) {
		return false
	}
	for i, w := range want {
		pc := pcs[i]
		if i > 0 {
			pc--
		}
		if st.lookup(tr, pid, path, pc) != w {
			return false
		}
	}
	return true
}

// recordChain records bin (dwarfchain) for secs of CPU time in mode and
// returns how many of its samples were taken in leaf and how many of
// those hold the whole chain up to main.
func recordChain(t *testing.T, bin string, opts Options, secs string) (inLeaf, good, total int, d *trace) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts.Frequency = 1000
	opts.Command = exec.Command(bin, secs)
	opts.Streams = []io.Writer{&out}
	tr, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	pid := uint32(tr.Pid())
	d = readTrace(t, out.Bytes())
	st := openSymtab(t, bin)
	for _, s := range d.samples {
		if s.Pid != pid {
			continue
		}
		total++
		pcs := userFrames(d.stacks[s.Stack])
		if len(pcs) == 0 || st.lookup(d, pid, bin, pcs[0]) != "leaf" {
			continue
		}
		inLeaf++
		if chainFrom(st, d, pid, bin, pcs, deepChain) {
			good++
		}
	}
	truncated := 0
	for _, s := range d.samples {
		if s.Pid == pid && s.Flags&format.SampleTruncated != 0 {
			truncated++
		}
	}
	t.Logf("%v: %d samples (%d truncated), %d in leaf, %d of them with the whole chain; %d lost events; stats %+v", opts.Unwind, total, truncated, inLeaf, good, len(d.lost), tr.Stats())
	return inLeaf, good, total, d
}

// TestDWARFChain is issue 5's acceptance test: on a program built without
// frame pointers, frame-pointer sampling recovers main → a → … → leaf in
// under 10% of the samples taken in leaf, DWARF mode in at least 99%.
func TestDWARFChain(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "dwarfchain", []string{"testdata/dwarfchain.c"}, "-O2", "-fomit-frame-pointer")
	for _, mode := range []UnwindMode{UnwindFP, UnwindDWARF} {
		inLeaf, good, total, _ := recordChain(t, bin, Options{Unwind: mode}, "1")
		if total < 200 || inLeaf < total/2 {
			t.Fatalf("%v: %d samples, %d in leaf, in 1 s of CPU at 1000 Hz", mode, total, inLeaf)
		}
		frac := float64(good) / float64(inLeaf)
		switch mode {
		case UnwindFP:
			if frac >= 0.10 {
				t.Errorf("frame pointers recover the chain in %.1f%% of leaf samples; the fixture should defeat them (< 10%%)", 100*frac)
			}
		case UnwindDWARF:
			if frac < 0.99 {
				t.Errorf("DWARF mode recovers the chain in %.1f%% of leaf samples, want ≥ 99%%", 100*frac)
			}
		}
	}
}

// profileChain symbolizes a stream with the symbolizer and returns how
// many samples have leaf as their innermost user function and how many of
// those hold the whole chain.
func profileChain(t *testing.T, stream []byte) (inLeaf, good int64, p *symbolizer.Profile) {
	t.Helper()
	r, err := format.NewReader(bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	p, err = symbolizer.Build(r, &symbolizer.Options{NoDebuginfod: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Samples {
		var names []string
		for _, li := range s.Locs {
			l := p.Locations[li]
			if l.Abs >= kernelStart {
				continue
			}
			names = append(names, l.FunctionName(0))
		}
		if len(names) == 0 || names[0] != "leaf" {
			continue
		}
		inLeaf += s.Count
		if len(names) >= len(deepChain) && strings.Join(names[:len(deepChain)], ",") == strings.Join(deepChain, ",") {
			good += s.Count
		}
	}
	return inLeaf, good, p
}

// TestDWARFKeepRaw records the fixture with KeepRaw: the stream holds
// RawStack events (no user frames), and the symbolizer unwinds them
// offline with the same engine to the same chains as online unwinding.
func TestDWARFKeepRaw(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "dwarfchain", []string{"testdata/dwarfchain.c"}, "-O2", "-fomit-frame-pointer")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := Start(ctx, Options{Frequency: 1000, Command: exec.Command(bin, "0.5"), Streams: []io.Writer{&out},
		Unwind: UnwindDWARF, KeepRaw: true, StackSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	r, err := format.NewReader(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	raws, samples := 0, 0
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case format.KindRawStack:
			raws++
			rs := &ev.RawStack
			if len(rs.Data) > 4096 || rs.RegMask&(1<<7) == 0 || rs.RegMask&(1<<16) == 0 {
				t.Fatalf("RawStack: %d bytes of stack, register mask %#x (want rsp and rip)", len(rs.Data), rs.RegMask)
			}
		case format.KindSample:
			samples++
		}
	}
	inLeaf, good, p := profileChain(t, out.Bytes())
	t.Logf("%d RawStack events, %d Sample events; %d samples in leaf, %d with the whole chain; profile: %d unwound from raw stacks", raws, samples, inLeaf, good, p.RawStacks)
	if raws < 150 || samples != 0 {
		t.Fatalf("%d RawStack and %d Sample events in 0.5 s of CPU at 1000 Hz, want only RawStack", raws, samples)
	}
	if inLeaf < int64(raws)/2 || float64(good) < 0.99*float64(inLeaf) {
		t.Errorf("offline unwinding recovers the chain in %d of %d leaf samples, want ≥ 99%%", good, inLeaf)
	}
}

// TestAutoUnwind records with UnwindAuto a program without frame pointers
// (its module gets CFI: ≥ 99% of leaf samples hold the chain) and one with
// them (its module gets frame pointers: ≥ 95% of samples hold
// main → a → b → c, as TestLaunchChain asks of the kernel's walk).
func TestAutoUnwind(t *testing.T) {
	needPerf(t)
	noFP := testbuild.CC(t, "cc", "dwarfchain", []string{"testdata/dwarfchain.c"}, "-O2", "-fomit-frame-pointer")
	inLeaf, good, total, _ := recordChain(t, noFP, Options{Unwind: UnwindAuto}, "0.5")
	if total < 150 || inLeaf < total/2 {
		t.Fatalf("%d samples, %d in leaf, in 0.5 s of CPU at 1000 Hz", total, inLeaf)
	}
	if frac := float64(good) / float64(inLeaf); frac < 0.99 {
		t.Errorf("auto mode, no frame pointers: chain in %.1f%% of leaf samples, want ≥ 99%%", 100*frac)
	}

	fp := testbuild.CC(t, "cc", "chain", []string{"testdata/chain.c"}, "-O2", "-fno-omit-frame-pointer")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := Start(ctx, Options{Frequency: 1000, Command: exec.Command(fp, "0.5"), Streams: []io.Writer{&out}, Unwind: UnwindAuto})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	pid := uint32(tr.Pid())
	d := readTrace(t, out.Bytes())
	st := openSymtab(t, fp)
	total, good = 0, 0
	for _, s := range d.samples {
		if s.Pid != pid {
			continue
		}
		total++
		if hasChain(st, d, pid, fp, d.stacks[s.Stack]) {
			good++
		}
	}
	t.Logf("auto mode, frame pointers: %d of %d samples hold main→a→b→c", good, total)
	if total < 150 {
		t.Fatalf("only %d samples in 0.5 s of CPU at 1000 Hz", total)
	}
	if frac := float64(good) / float64(total); frac < 0.95 {
		t.Errorf("auto mode, frame pointers: chain in %.1f%% of samples, want ≥ 95%%", 100*frac)
	}
}

// TestSelfProfileDWARF profiles the test binary itself in DWARF mode: Go
// code unwinds through the Go linker's .debug_frame up to the test
// function that called selfSpin.
func TestSelfProfileDWARF(t *testing.T) {
	needPerf(t)
	var out bytes.Buffer
	tr, err := Start(context.Background(), Options{Frequency: 999, Streams: []io.Writer{&out}, Unwind: UnwindDWARF})
	if err != nil {
		t.Fatal(err)
	}
	selfSpin(500 * time.Millisecond)
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	d := readTrace(t, out.Bytes())
	total, spin, caller := 0, 0, 0
	for _, s := range d.samples {
		if s.Tid != uint32(spinTid) {
			continue
		}
		total++
		pcs := userFrames(d.stacks[s.Stack])
		if stackHas(pcs, ".selfSpin") {
			spin++
			if stackHas(pcs, ".TestSelfProfileDWARF") && stackHas(pcs, "testing.tRunner") {
				caller++
			}
		}
	}
	t.Logf("%d samples of thread %d, %d in selfSpin, %d of them up to testing.tRunner; %d lost", total, spinTid, spin, caller, len(d.lost))
	if total < 60 {
		t.Fatalf("only %d samples of the spinning thread in 0.5 s of its CPU time at 999 Hz", total)
	}
	if frac := float64(spin) / float64(total); frac < 0.8 {
		t.Errorf("%.0f%% of the spinning thread's samples in selfSpin, want ≥ 80%%", 100*frac)
	}
	if frac := float64(caller) / float64(max(spin, 1)); frac < 0.95 {
		t.Errorf("%.0f%% of selfSpin samples unwind to testing.tRunner, want ≥ 95%%", 100*frac)
	}
}

// TestDWARFThroughVDSO unwinds samples taken in the vDSO's clock_gettime
// (whose CFI the unwinder reads from its own process's vDSO) through libc
// to main. Frame-pointer fallback in the vDSO loses the callers of about
// 1% of them, in its prologues and epilogues.
func TestDWARFThroughVDSO(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "vdsochain", []string{"testdata/vdsochain.c"}, "-O2", "-fomit-frame-pointer")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := Start(ctx, Options{Frequency: 1000, Command: exec.Command(bin, "0.8"), Streams: []io.Writer{&out}, Unwind: UnwindDWARF})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	pid := uint32(tr.Pid())
	d := readTrace(t, out.Bytes())
	st := openSymtab(t, bin)
	want := []string{"spin", "b", "a", "main"}
	total, inVDSO, good := 0, 0, 0
	for _, s := range d.samples {
		if s.Pid != pid {
			continue
		}
		total++
		pcs := userFrames(d.stacks[s.Stack])
		vdso := false
		for _, m := range d.modules {
			if len(pcs) > 0 && m.Kind == format.ModuleVDSO && pcs[0] >= m.Base && pcs[0] < m.Base+m.Size {
				vdso = true
			}
		}
		if !vdso {
			continue
		}
		inVDSO++
		ok := false
		for i := 1; i+len(want) <= len(pcs) && !ok; i++ {
			ok = chainFrom(st, d, pid, bin, append([]uint64{pcs[i] - 1}, pcs[i+1:]...), want)
		}
		if ok {
			good++
		} else if testing.Verbose() {
			t.Logf("no chain: %x", pcs)
		}
	}
	t.Logf("%d samples, %d in the vDSO, %d of them hold main→a→b→spin", total, inVDSO, good)
	if total < 200 || inVDSO < total/4 {
		t.Fatalf("%d samples, %d in the vDSO, in 0.8 s of CPU at 1000 Hz", total, inVDSO)
	}
	if frac := float64(good) / float64(inVDSO); frac < 0.997 {
		t.Errorf("%.1f%% of vDSO samples hold main→a→b→spin, want ≥ 99.7%%", 100*frac)
	}
}

// TestDWARFAttach attaches to a running program built without frame
// pointers: its modules come from /proc/PID/maps rather than MMAP2
// records, and DWARF mode recovers the chain all the same.
func TestDWARFAttach(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "dwarfchain", []string{"testdata/dwarfchain.c"}, "-O2", "-fomit-frame-pointer")
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	time.Sleep(50 * time.Millisecond) // let it exec and map its libraries
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	tr, err := Start(ctx, Options{Frequency: 1000, Pid: cmd.Process.Pid, Streams: []io.Writer{&out}, Unwind: UnwindDWARF})
	if err != nil {
		t.Fatal(err)
	}
	<-tr.Done()
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	d := readTrace(t, out.Bytes())
	st := openSymtab(t, bin)
	inLeaf, good := 0, 0
	for _, s := range d.samples {
		pcs := userFrames(d.stacks[s.Stack])
		if s.Pid != pid || len(pcs) == 0 || st.lookup(d, pid, bin, pcs[0]) != "leaf" {
			continue
		}
		inLeaf++
		if chainFrom(st, d, pid, bin, pcs, deepChain) {
			good++
		}
	}
	t.Logf("%d samples, %d in leaf, %d with the whole chain", len(d.samples), inLeaf, good)
	if inLeaf < 100 {
		t.Fatalf("only %d samples in leaf in 1.5 s at 1000 Hz", inLeaf)
	}
	if frac := float64(good) / float64(inLeaf); frac < 0.99 {
		t.Errorf("attached DWARF mode: chain in %.1f%% of leaf samples, want ≥ 99%%", 100*frac)
	}
}

// TestDWARFForkDlopen: a library loaded with dlopen after start and a
// forked child, all built without frame pointers. Samples in the library,
// in the parent and in the child, unwind through it to main: tables are
// loaded for modules that appear late, and a child inherits its parent's
// modules.
func TestDWARFForkDlopen(t *testing.T) {
	needPerf(t)
	lib := testbuild.CC(t, "cc", "liblate.so", []string{"testdata/late.c"}, "-O2", "-fomit-frame-pointer", "-shared", "-fPIC")
	bin := testbuild.CC(t, "cc", "forkdl", []string{"testdata/forkdl.c"}, "-O2", "-fomit-frame-pointer", "-ldl")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := Start(ctx, Options{Frequency: 999, Command: exec.Command(bin, lib), Streams: []io.Writer{&out}, Unwind: UnwindDWARF})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(tr.Pid())
	d := readTrace(t, out.Bytes())
	st := openSymtab(t, bin)
	inLate, withMain := map[uint32]int{}, map[uint32]int{}
	for _, s := range d.samples {
		pcs := userFrames(d.stacks[s.Stack])
		if len(pcs) == 0 {
			continue
		}
		late := false
		for _, m := range d.modules {
			if m.Pid == s.Pid && filepath.Base(m.Path) == "liblate.so" && pcs[0] >= m.Base && pcs[0] < m.Base+m.Size {
				late = true
			}
		}
		if !late {
			continue
		}
		inLate[s.Pid]++
		for _, pc := range pcs[1:] {
			if st.lookup(d, s.Pid, bin, pc-1) == "main" {
				withMain[s.Pid]++
				break
			}
		}
	}
	t.Logf("parent %d; samples in liblate.so per pid %v, of them unwound to main %v", pid, inLate, withMain)
	if len(inLate) != 2 {
		t.Fatalf("samples in liblate.so from %d processes, want parent and child: %v", len(inLate), inLate)
	}
	for p, n := range inLate {
		if n < 30 || float64(withMain[p]) < 0.97*float64(n) {
			t.Errorf("pid %d: %d of %d samples in liblate.so unwound to main, want ≥ 97%%", p, withMain[p], n)
		}
	}
}

// TestDWARFDeletedBinary deletes the program's file while it sleeps,
// before its first sample in main: its unwind table is then read through
// /proc/PID/map_files.
func TestDWARFDeletedBinary(t *testing.T) {
	needPerf(t)
	if os.Geteuid() != 0 {
		testbuild.Skip(t, "reading /proc/PID/map_files needs root (CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE)")
	}
	built := testbuild.CC(t, "cc", "dwarfchain", []string{"testdata/dwarfchain.c"}, "-O2", "-fomit-frame-pointer")
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "dwarfchain-deleted")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	st := openSymtab(t, bin)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := Start(ctx, Options{Frequency: 1000, Command: exec.Command(bin, "0.5", "0.3"), Streams: []io.Writer{&out}, Unwind: UnwindDWARF})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	pid := uint32(tr.Pid())
	d := readTrace(t, out.Bytes())
	inLeaf, good := 0, 0
	for _, s := range d.samples {
		pcs := userFrames(d.stacks[s.Stack])
		if s.Pid != pid || len(pcs) == 0 || st.lookup(d, pid, bin, pcs[0]) != "leaf" {
			continue
		}
		inLeaf++
		if chainFrom(st, d, pid, bin, pcs, deepChain) {
			good++
		}
	}
	t.Logf("%d samples, %d in leaf, %d with the whole chain", len(d.samples), inLeaf, good)
	if inLeaf < 100 {
		t.Fatalf("only %d samples in leaf in 0.5 s of CPU at 1000 Hz", inLeaf)
	}
	if frac := float64(good) / float64(inLeaf); frac < 0.99 {
		t.Errorf("deleted binary: chain in %.1f%% of leaf samples, want ≥ 99%%", 100*frac)
	}
}

// TestDWARFTruncated copies too little stack for the chain: samples are
// flagged truncated, where whole chains (TestDWARFChain) are not.
func TestDWARFTruncated(t *testing.T) {
	needPerf(t)
	bin := testbuild.CC(t, "cc", "dwarfchain", []string{"testdata/dwarfchain.c"}, "-O2", "-fomit-frame-pointer")
	_, good, total, d := recordChain(t, bin, Options{Unwind: UnwindDWARF, StackSize: 32}, "0.3")
	truncated := 0
	for _, s := range d.samples {
		if s.Flags&format.SampleTruncated != 0 {
			truncated++
		}
	}
	if total < 60 || good != 0 || truncated < total*9/10 {
		t.Errorf("32-byte stack copies: %d samples, %d with the whole chain (want 0), %d flagged truncated (want ≥ 90%%)", total, good, truncated)
	}
}

// selfAllocSink keeps selfAlloc's blocks reachable for a while.
var selfAllocSink [][]byte

// selfAlloc allocates 64 KiB blocks for d: each is a large allocation,
// which the runtime makes on the thread's g0 stack under
// runtime.systemstack ((*mheap).alloc).
//
//go:noinline
func selfAlloc(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		b := make([]byte, 64<<10)
		b[len(b)-1] = 1
		selfAllocSink = append(selfAllocSink, b)
		if len(selfAllocSink) > 64 {
			selfAllocSink = selfAllocSink[:0]
		}
	}
}

// TestSelfProfileSystemstack profiles the test binary itself while it
// allocates large blocks, in the default mode and in DWARF mode: the
// heap's allocation runs on the g0 stack under runtime.systemstack, whose
// stack copy does not hold the goroutine's frames. Its samples must still
// reach selfAlloc (through systemstack's frame record, by the kernel's
// frame-pointer walk of the same sample).
func TestSelfProfileSystemstack(t *testing.T) {
	needPerf(t)
	for _, mode := range []UnwindMode{UnwindAuto, UnwindDWARF} {
		var out bytes.Buffer
		tr, err := Start(context.Background(), Options{Frequency: 999, Streams: []io.Writer{&out}, Unwind: mode})
		if err != nil {
			t.Fatal(err)
		}
		selfAlloc(1500 * time.Millisecond)
		if err := tr.Stop(); err != nil {
			t.Fatal(err)
		}
		d := readTrace(t, out.Bytes())
		g0, whole := 0, 0
		for _, s := range d.samples {
			pcs := userFrames(d.stacks[s.Stack])
			// What the runtime does on g0 for the allocating
			// goroutine: get a span from the heap, assist the GC.
			if !stackHas(pcs, "runtime.(*mheap).alloc.func1") && !stackHas(pcs, "runtime.gcAssistAlloc.func2") {
				continue
			}
			g0++
			if stackHas(pcs, ".selfAlloc") && stackHas(pcs, ".TestSelfProfileSystemstack") {
				whole++
			}
		}
		t.Logf("unwind %v: %d samples on g0 for the allocating goroutine, %d of them up to selfAlloc and the test", mode, g0, whole)
		if g0 < 10 {
			t.Fatalf("unwind %v: %d samples on g0 for the allocating goroutine: the test did not exercise systemstack", mode, g0)
		}
		if frac := float64(whole) / float64(g0); frac < 0.95 {
			t.Errorf("unwind %v: %.0f%% of the samples under systemstack reach selfAlloc, want >= 95%%", mode, 100*frac)
		}
	}
}
