package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// TestRecordGoOutermost records a Go program busy in its scheduler with
// --unwind dwarf (online and --keep-raw, unwound by the symbolizer) and
// --unwind auto, and checks that no stack's outermost frame is an address
// in no mapping. The CFI of a Go thread's first functions reads above the
// stack (rt0_go reads argc, runtime.clone the word above a new thread's
// stack, runtime.mcall the word above the g0 frame it switched to); those
// words showed up as outermost frames such as 0x1.
func TestRecordGoOutermost(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	testbuild.Need(t, "go", "builds the Go fixture")
	src, _ := filepath.Abs("testdata/pingpong")
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool: "go", Args: []string{"build", "-o", "{dir}/pingpong", "."},
		Inputs: []string{src}, Out: "pingpong", Env: []string{"CGO_ENABLED=0", "GOFLAGS="}, Dir: src,
	})
	dir := t.TempDir()
	bare := regexp.MustCompile(`^0x[0-9a-f]+$`)
	for _, mode := range [][]string{{"--unwind", "dwarf"}, {"--unwind", "dwarf", "--keep-raw"}, {"--unwind", "auto"}} {
		out := filepath.Join(dir, "t.rawstack")
		args := append(append([]string{"record", "-q", "-o", out, "-F", "999"}, mode...), "--", bin, "0.7")
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%q exited %d: %s", args, code, stderr.String())
		}
		folded := filepath.Join(dir, "t.folded")
		stderr.Reset()
		if code := run([]string{"convert", out, "--to", "folded", "--no-debuginfod", "-o", folded}, &stdout, &stderr); code != 0 {
			t.Fatalf("convert exited %d: %s", code, stderr.String())
		}
		b, err := os.ReadFile(folded)
		if err != nil {
			t.Fatal(err)
		}
		var all, bad, g0 int
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			sp := strings.LastIndexByte(line, ' ')
			n, err := strconv.Atoi(line[sp+1:])
			if err != nil {
				t.Fatalf("folded line %q", line)
			}
			all += n
			root, _, _ := strings.Cut(line[:sp], ";")
			if bare.MatchString(root) {
				bad += n
				if bad <= 3*n {
					t.Logf("%q: outermost frame in no mapping: %.200s", mode, line)
				}
			}
			if strings.HasPrefix(root, "runtime.mcall") || strings.HasPrefix(root, "runtime.clone") || strings.HasPrefix(root, "runtime.rt0_go") {
				g0 += n
			}
		}
		t.Logf("%q: %d samples, %d end at mcall/clone/rt0_go, %d in no mapping", mode, all, g0, bad)
		if bad > 0 {
			t.Errorf("%q: %d of %d samples end in a frame in no mapping", mode, bad, all)
		}
		if all < 100 || g0 == 0 {
			t.Errorf("%q: %d samples, %d on g0 stacks: the test did not exercise the scheduler", mode, all, g0)
		}
	}
}
