//go:build linux

package tracer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
)

// TestAllocNative: a C program that allocates and frees 1 GiB in one
// chain (main → churn) and keeps 128 MiB in another (main → keep),
// recorded with Alloc at the default rate, gives those figures ±15% as
// alloc_space of the first and inuse_space of the second.
func TestAllocNative(t *testing.T) {
	needBPF(t)
	bin := buildFixture(t, "allocs")
	stream := recordBPF(t, Options{Alloc: true}, exec.Command(bin))
	p := symbolize(t, stream)
	if !p.Memory {
		t.Fatal("the trace has no allocation samples")
	}
	type fig struct{ alloc, inuse, objects int64 }
	by := map[string]*fig{} // the chain below malloc: "churn" or "keep", under main
	for _, s := range p.Samples {
		if s.AllocObjects == 0 {
			continue
		}
		fns, _ := names(p, s)
		// fns: malloc (libc), then the program's frames.
		var site string
		for i, f := range fns {
			if (f == "churn" || f == "keep") && i+1 < len(fns) && fns[i+1] == "main" {
				site = f
				break
			}
		}
		if site == "" {
			t.Logf("allocation sample outside the two chains: %v (%d bytes)", fns, s.AllocBytes)
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
	var ae interface{ Unwrap() error }
	if !errors.As(err, &ae) || !containsPath(err.Error(), bin) {
		t.Errorf("error %q does not name %s", err, bin)
	}
}

func containsPath(s, p string) bool {
	for i := 0; i+len(p) <= len(s); i++ {
		if s[i:i+len(p)] == p {
			return true
		}
	}
	return false
}

// TestAllocPerfRefused: the perf back end refuses Alloc with an
// OptionError.
func TestAllocPerfRefused(t *testing.T) {
	_, err := Start(t.Context(), Options{Alloc: true, Command: exec.Command("true")})
	var oe *platform.OptionError
	if !errors.As(err, &oe) || oe.Option != "Alloc" {
		t.Fatalf("Alloc with the perf back end: %v, want an OptionError naming Alloc", err)
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

// TestAllocAttach: Alloc on a running process (Pid) finds its allocator
// in its maps and records the allocations it makes from then on.
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
