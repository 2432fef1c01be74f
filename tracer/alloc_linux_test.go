//go:build linux

package tracer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/ebpf"
	"github.com/rawstack/rawstack/symbolizer"
)

// TestAllocNative: a C program that allocates and frees 1 GiB in one
// chain (main → churn) and keeps 128 MiB in another (main → keep),
// recorded with Alloc at the default rate, gives those figures ±15% as
// alloc_space of the first and inuse_space of the second. Launched, it
// is sampled by the preloaded sampler, through the ring it shares with
// the recorder (the default unwinding copies the stack). With the perf
// back end too, whose default unwinding (auto) follows a frame-pointer
// program's frame pointers for its CPU samples: the sampler's records
// carry no chain and are unwound whole from their stack copy; and in
// frame-pointer mode, where the sampler walks the frame pointers itself
// (the perf back end has no BPF program to walk them).
func TestAllocNative(t *testing.T) {
	fp := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-g", "-fno-omit-frame-pointer", "-o", "{dir}/allocs-fp", "{in0}"},
		Inputs: []string{"testdata/allocs.c"},
		Out:    "allocs-fp",
	})
	for _, c := range []struct {
		name string
		be   Backend
		uw   UnwindMode
		fp   bool
	}{
		{"ebpf", BackendEBPF, UnwindDWARF, false},
		{"perf", BackendPerf, UnwindAuto, false},
		{"perf-fp", BackendPerf, UnwindAuto, true},
		{"perf-fpmode", BackendPerf, UnwindFP, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.be == BackendEBPF {
				needBPF(t)
			} else {
				needPerf(t)
			}
			bin := buildFixture(t, "allocs")
			if c.fp {
				bin = fp
			}
			stream, st := recordAlloc(t, c.be, c.uw, bin, false)
			if st.AllocMode != platform.AllocPreloadRing {
				t.Errorf("a launched command sampled by %q, want %q", st.AllocMode, platform.AllocPreloadRing)
			}
			p := symbolize(t, stream)
			checkAllocFigures(t, p)
			checkAllocLeaves(t, p)
		})
	}
}

// TestAllocAllocators: the same figures for the allocs fixture linked
// against jemalloc and tcmalloc (Debian's libjemalloc2,
// libtcmalloc-minimal4) and glibc's, launched (the preloaded sampler
// passes the calls to the program's allocator) and attached to while it
// runs (the sampler injected, passing the calls to the allocator the
// process called).
func TestAllocAllocators(t *testing.T) {
	needBPF(t)
	for _, a := range []struct{ name, lib, path string }{
		{"glibc", "", ""},
		{"jemalloc", "-ljemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
		{"tcmalloc", "-l:libtcmalloc_minimal.so.4", "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"},
	} {
		t.Run(a.name, func(t *testing.T) {
			bin := buildFixture(t, "allocs")
			if a.lib != "" {
				if _, err := os.Stat(a.path); err != nil {
					testbuild.Skip(t, "%s is not installed (Debian: libjemalloc-dev, libtcmalloc-minimal4)", a.path)
				}
				bin = testbuild.Build(t, testbuild.Cmd{
					Tool:   "cc",
					Args:   []string{"-O2", "-g", "-fomit-frame-pointer", "-o", "{dir}/allocs-" + a.name, "{in0}", "-Wl,--no-as-needed", a.lib},
					Inputs: []string{"testdata/allocs.c"},
					Out:    "allocs-" + a.name,
				})
			}
			for _, attach := range []bool{false, true} {
				mode := platform.AllocPreloadRing
				if attach {
					mode = platform.AllocInjectRing
				}
				if a.name == "glibc" && !attach {
					continue // TestAllocNative
				}
				t.Run(mode, func(t *testing.T) {
					stream, st := recordAlloc(t, BackendEBPF, UnwindDWARF, bin, attach)
					if st.AllocMode != mode {
						t.Errorf("sampled by %q, want %q", st.AllocMode, mode)
					}
					p := symbolize(t, stream)
					checkAllocFigures(t, p)
					checkAllocLeaves(t, p)
				})
			}
		})
	}
}

// recordAlloc records the allocs fixture bin with Alloc and back end be:
// launched, or (attach) started with "wait" and attached to by pid
// before it allocates.
func recordAlloc(t *testing.T, be Backend, unwind UnwindMode, bin string, attach bool) ([]byte, Stats) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := Options{Backend: be, Unwind: unwind, Alloc: true, Streams: []io.Writer{&out}}
	var next io.WriteCloser
	var target *exec.Cmd
	exited := make(chan struct{})
	if attach {
		target = exec.Command(bin, "wait")
		stdout, err := target.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if next, err = target.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := target.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			target.Process.Kill()
			<-exited
		}()
		line := make([]byte, 6)
		if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "ready\n" {
			t.Fatalf("%s wait: %q, %v", bin, line, err)
		}
		opts.Pid = target.Process.Pid
	} else {
		opts.Command = exec.Command(bin)
	}
	tr, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if attach {
		if _, err := next.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		go func() { target.Wait(); close(exited) }() // reaped: the tracer sees it gone
		<-tr.Done()
		if err := tr.Stop(); err != nil {
			t.Fatal(err)
		}
	} else if err := tr.Wait(); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	st := tr.Stats()
	t.Logf("stats %+v", st)
	return out.Bytes(), st
}

// checkAllocFigures checks the allocs fixture's figures: main → churn
// allocates 1 GiB in 65 536 blocks and frees them, main → keep
// allocates and keeps 128 MiB in 128 blocks, ±15%.
func checkAllocFigures(t *testing.T, p *symbolizer.Profile) {
	t.Helper()
	if !p.Memory {
		t.Fatal("the trace has no allocation samples")
	}
	type fig struct{ alloc, inuse, objects int64 }
	by := map[string]*fig{} // the chain below malloc: "churn" or "keep", under main
	outside := 0
	for _, s := range p.Samples {
		if s.AllocObjects == 0 {
			continue
		}
		fns, _ := names(p, s)
		// fns: malloc (the allocator's, or the sampler's and its
		// marker), then the program's frames.
		var site string
		for i, f := range fns {
			if (f == "churn" || f == "keep") && i+1 < len(fns) && fns[i+1] == "main" {
				site = f
				break
			}
		}
		if site == "" {
			if outside++; outside <= 5 {
				t.Logf("allocation sample outside the two chains: %v (%d bytes)", fns, s.AllocBytes)
			}
			continue
		}
		f := by[site]
		if f == nil {
			f = &fig{}
			by[site] = f
		}
		f.alloc += s.AllocBytes
		f.inuse += s.InuseBytes
		f.objects += s.AllocObjects
	}
	if outside > 5 {
		t.Logf("... %d allocation samples outside the two chains in all", outside)
	}
	churn, keep := by["churn"], by["keep"]
	if churn == nil || keep == nil {
		t.Fatalf("no samples in main→churn or main→keep: %v", by)
	}
	t.Logf("churn: alloc_space %.1f MiB (%d allocations), inuse_space %.1f MiB; keep: alloc_space %.1f MiB (%d allocations), inuse_space %.1f MiB; unmatched frees %d",
		mib(churn.alloc), churn.objects, mib(churn.inuse), mib(keep.alloc), keep.objects, mib(keep.inuse), p.UnmatchedFrees)
	within := func(what string, got, want int64) {
		t.Helper()
		if float64(got) < 0.85*float64(want) || float64(got) > 1.15*float64(want) {
			t.Errorf("%s = %d, want %d ±15%%", what, got, want)
		}
	}
	within("churn alloc_space", churn.alloc, 1<<30)
	within("keep alloc_space", keep.alloc, 128<<20)
	within("keep inuse_space", keep.inuse, 128<<20)
	within("churn alloc_objects", churn.objects, 65536)
	within("keep alloc_objects", keep.objects, 128)
	if churn.inuse > 16<<20 {
		t.Errorf("churn inuse_space %.1f MiB: it frees every block", mib(churn.inuse))
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// TestAllocStatic: a statically linked program has no allocator library
// to probe; the error names the binary.
func TestAllocStatic(t *testing.T) {
	needBPF(t)
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-static", "-o", "{dir}/allocs-static", "{in0}"},
		Inputs: []string{"testdata/allocs.c"},
		Out:    "allocs-static",
	})
	_, err := Start(t.Context(), Options{Backend: BackendEBPF, Alloc: true, Command: exec.Command(bin)})
	if err == nil {
		t.Fatal("Alloc on a static binary: no error")
	}
	t.Log(err)
	if !errors.Is(err, ebpf.ErrNoAllocator) || !strings.Contains(err.Error(), bin) {
		t.Errorf("error %q: want ebpf.ErrNoAllocator naming %s", err, bin)
	}
}

// TestAllocNativeFP: with frame pointers (the kernel's walk in BPF), the
// stack of a sampled allocation read at malloc's first instruction keeps
// the caller, whose return address is at the stack pointer there.
func TestAllocNativeFP(t *testing.T) {
	needBPF(t)
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-g", "-fno-omit-frame-pointer", "-o", "{dir}/allocs-fp", "{in0}"},
		Inputs: []string{"testdata/allocs.c"},
		Out:    "allocs-fp",
	})
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := Start(ctx, Options{Backend: BackendEBPF, Unwind: UnwindFP, Alloc: true, Command: exec.Command(bin), Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.AllocMode != platform.AllocPreload {
		t.Errorf("sampled by %q with frame pointers, want %q (the markers: the BPF programs walk the frames)", st.AllocMode, platform.AllocPreload)
	}
	p := symbolize(t, out.Bytes())
	var keep, all int64
	for _, s := range p.Samples {
		if s.AllocObjects == 0 {
			continue
		}
		all += s.AllocBytes
		fns, _ := names(p, s)
		for i := 0; i+1 < len(fns); i++ {
			if fns[i] == "keep" && fns[i+1] == "main" {
				keep += s.InuseBytes
				break
			}
		}
	}
	t.Logf("main→keep inuse_space %.1f MiB of %.1f MiB allocated", mib(keep), mib(all))
	if float64(keep) < 0.85*(128<<20) || float64(keep) > 1.15*(128<<20) {
		t.Errorf("main→keep inuse_space = %.1f MiB, want 128 ±15%%", mib(keep))
	}
}

// TestAllocAttach: Alloc on a running process (Pid) injects the sampler
// and records the allocations it makes from then on.
func TestAllocAttach(t *testing.T) {
	needBPF(t)
	bin := buildFixture(t, "allocs")
	target := exec.Command(bin, "loop")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		target.Process.Kill()
		target.Wait()
	}()
	time.Sleep(100 * time.Millisecond) // past the dynamic loader: libc is mapped
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	tr, err := Start(ctx, Options{Backend: BackendEBPF, Unwind: UnwindDWARF, Alloc: true, Pid: target.Process.Pid, Streams: []io.Writer{&out}})
	if err != nil {
		t.Fatal(err)
	}
	<-tr.Done()
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	p := symbolize(t, out.Bytes())
	var churn, n int64
	for _, s := range p.Samples {
		if s.AllocObjects == 0 {
			continue
		}
		n += s.AllocObjects
		fns, _ := names(p, s)
		for i := 0; i+1 < len(fns); i++ {
			if fns[i] == "churn" && fns[i+1] == "main" {
				churn += s.AllocBytes
				break
			}
		}
	}
	t.Logf("%d allocations sampled in 1.5 s, %.1f MiB of them in main→churn", n, mib(churn))
	if churn < 16<<20 {
		t.Errorf("main→churn alloc_space %.1f MiB in 1.5 s of churning: the allocator of the running process was not probed", mib(churn))
	}
}

// TestAllocHeaptrack holds the sampled figures of the allocs fixture to
// heaptrack's, which records every call: main→churn's allocation count
// and main→keep's bytes in use agree within 15%.
func TestAllocHeaptrack(t *testing.T) {
	needBPF(t)
	heaptrack := testbuild.Need(t, "heaptrack", "the peer that records every allocation")
	heaptrackPrint := testbuild.Need(t, "heaptrack_print", "prints heaptrack's recording")
	bin := buildFixture(t, "allocs")
	dir := t.TempDir()
	if b, err := exec.Command(heaptrack, "-o", filepath.Join(dir, "ht"), bin).CombinedOutput(); err != nil {
		t.Fatalf("heaptrack: %v\n%s", err, b)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ht*"))
	if len(files) != 1 {
		t.Fatalf("heaptrack wrote %v", files)
	}
	printed, err := exec.Command(heaptrackPrint, files[0]).Output()
	if err != nil {
		t.Fatalf("heaptrack_print: %v", err)
	}
	// "65536 calls to allocation functions with 0B peak consumption from"
	// and "134.22M peak memory consumed over 128 calls from", each followed
	// by the allocating function's line.
	var htChurnCalls, htKeepBytes float64
	lines := strings.Split(string(printed), "\n")
	for i := 0; i+1 < len(lines); i++ {
		fn := strings.TrimSpace(lines[i+1])
		f := strings.Fields(lines[i])
		switch {
		case fn == "churn" && len(f) > 2 && f[1] == "calls" && f[2] == "to" && htChurnCalls == 0:
			htChurnCalls, _ = strconv.ParseFloat(f[0], 64)
		case fn == "keep" && strings.Contains(lines[i], "peak memory consumed") && htKeepBytes == 0:
			htKeepBytes = heaptrackSize(f[0])
		}
	}
	if htChurnCalls == 0 || htKeepBytes == 0 {
		t.Fatalf("heaptrack_print names no churn calls or keep peak:\n%s", printed)
	}
	p := symbolize(t, recordBPF(t, Options{Alloc: true}, exec.Command(bin)))
	var churnObjects, keepInuse int64
	for _, s := range p.Samples {
		fns, _ := names(p, s)
		for i := 0; i+1 < len(fns); i++ {
			if fns[i+1] != "main" {
				continue
			}
			switch fns[i] {
			case "churn":
				churnObjects += s.AllocObjects
			case "keep":
				keepInuse += s.InuseBytes
			}
		}
	}
	t.Logf("main→churn: %d allocations, heaptrack %.0f; main→keep in use: %.1f MiB, heaptrack %.1f MiB", churnObjects, htChurnCalls, mib(keepInuse), htKeepBytes/(1<<20))
	for _, c := range []struct {
		what      string
		got, want float64
	}{{"main→churn allocations", float64(churnObjects), htChurnCalls}, {"main→keep bytes in use", float64(keepInuse), htKeepBytes}} {
		if c.got < 0.85*c.want || c.got > 1.15*c.want {
			t.Errorf("%s: %.0f, heaptrack's %.0f: more than 15%% apart", c.what, c.got, c.want)
		}
	}
}

// heaptrackSize parses heaptrack_print's sizes: "134.22M", "72.70K", "0B"
// (powers of 1000).
func heaptrackSize(s string) float64 {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "G"):
		mult = 1e9
	case strings.HasSuffix(s, "M"):
		mult = 1e6
	case strings.HasSuffix(s, "K"):
		mult = 1e3
	}
	v, _ := strconv.ParseFloat(strings.TrimRight(s, "GMKB"), 64)
	return v * mult
}
