//go:build linux && amd64

package allocshim

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestObjectCurrent: the committed object is what build.sh makes of
// shim.c with this machine's clang (CI's is the one it was built with).
func TestObjectCurrent(t *testing.T) {
	testbuild.NeedAll(t, "rebuilding the allocation sampler", "clang", "llvm-strip")
	out := filepath.Join(t.TempDir(), "shim.so")
	if b, err := exec.Command("sh", "src/build.sh", out).CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, Object) {
		t.Errorf("librawstack-alloc.so (%d bytes) is not what build.sh makes of shim.c (%d bytes): run go generate ./platform/linux/allocshim", len(Object), len(got))
	}
}

// TestSampling runs testdata/sampled.c under the sampler, with the
// markers defined by the program: what they report, unbiased as the
// recorder does, gives the bytes allocated and kept ±15%, in four
// threads and again in a forked child, and no free of a block that was
// not reported.
func TestSampling(t *testing.T) {
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-pthread", "-rdynamic", "-o", "{dir}/sampled", "{in0}", "-lm"},
		Inputs: []string{"testdata/sampled.c"},
		Out:    "sampled",
	})
	so, err := Install("")
	if err != nil {
		t.Fatal(err)
	}
	const rate = 64 << 10
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+so, RateEnv+"="+strconv.Itoa(rate))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	// Each of 4 threads: 65536 blocks of 4 KiB, a fifth of them
	// reallocated from 2 KiB (counted as both), an eighth kept, and an
	// array of 8192 pointers kept.
	const wantAlloc, wantLive = 4 * (65536*4096*11/10 + 8192*8), 4 * (8192*4096 + 8192*8)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("output: %q, want a parent and a child line", out)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 5 {
			t.Fatalf("line %q", l)
		}
		alloc, _ := strconv.ParseFloat(f[1], 64)
		live, _ := strconv.ParseFloat(f[2], 64)
		bad, _ := strconv.Atoi(f[3])
		n, _ := strconv.Atoi(f[4])
		t.Logf("%s: %d samples, allocated %.1f MiB (want %.1f), kept %.1f MiB (want %.1f), frees of unreported blocks %d",
			f[0], n, alloc/(1<<20), float64(wantAlloc)/(1<<20), live/(1<<20), float64(wantLive)/(1<<20), bad)
		for _, c := range []struct {
			what      string
			got, want float64
		}{{"allocated", alloc, wantAlloc}, {"kept", live, wantLive}} {
			if c.got < 0.85*c.want || c.got > 1.15*c.want {
				t.Errorf("%s: %s %.0f bytes, want %.0f ±15%%", f[0], c.what, c.got, c.want)
			}
		}
		if bad != 0 {
			t.Errorf("%s: %d frees reported of blocks never reported allocated", f[0], bad)
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
