package allocshim

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// defines returns the integer #defines of a C source file.
func defines(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, m := range regexp.MustCompile(`(?m)^#define (\w+) (0x[0-9a-fA-F]+|\d+)u?(?:ll|ull)?\b`).FindAllStringSubmatch(string(b), -1) {
		v, err := strconv.ParseUint(m[2], 0, 64)
		if err == nil {
			out[m[1]] = v
		}
	}
	return out
}

// TestDefinesAgree: the numbers the sampler, the BPF programs and this
// package each write down for the same thing are the same.
func TestDefinesAgree(t *testing.T) {
	shim := defines(t, "src/shim.c")
	bpf := defines(t, "../ebpf/bpf/rawstack.bpf.c")
	for _, c := range []struct {
		what string
		got  uint64
		want uint64
	}{
		{"shim.c FREE_MAX", shim["FREE_MAX"], FreeQueue},
		{"rawstack.bpf.c SHIM_FREE_MAX", bpf["SHIM_FREE_MAX"], FreeQueue},
		{"shim.c RING_HDR", shim["RING_HDR"], RingHeader},
		{"shim.c RING_MAGIC", shim["RING_MAGIC"], ringMagic},
		{"shim.c RING_VERSION", shim["RING_VERSION"], ringVersion},
		{"shim.c RING_MAX_STACK", shim["RING_MAX_STACK"], MaxRingStack},
		{"rawstack.bpf.c MAX_STACK", bpf["MAX_STACK"], MaxRingStack},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
}
