package otlp_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
	"github.com/rawstack/rawstack/tracer"
)

func frameType(d pprofile.ProfilesDictionary, loc pprofile.Location) string {
	for _, ai := range loc.AttributeIndices().All() {
		a := d.AttributeTable().At(int(ai))
		if d.StringTable().At(int(a.KeyStrindex())) == otlp.AttrFrameType {
			return a.Value().Str()
		}
	}
	return ""
}

// kallsymsOracle reads /proc/kallsyms into address → names (every alias
// at an address), sorted, for a lookup of the symbol at or before an
// address.
type kallsymsOracle struct {
	addrs []uint64
	names map[uint64][]string
}

func readKallsyms(t *testing.T) *kallsymsOracle {
	t.Helper()
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		testbuild.Skip(t, "%v", err)
	}
	defer f.Close()
	o := &kallsymsOracle{names: map[uint64][]string{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || !strings.ContainsAny(fs[1], "tTwW") {
			continue
		}
		a, err := strconv.ParseUint(fs[0], 16, 64)
		if err != nil || a == 0 {
			continue
		}
		if _, ok := o.names[a]; !ok {
			o.addrs = append(o.addrs, a)
		}
		o.names[a] = append(o.names[a], fs[2])
	}
	if len(o.addrs) == 0 {
		testbuild.Skip(t, "/proc/kallsyms addresses are hidden (kptr_restrict): run as root")
	}
	sort.Slice(o.addrs, func(i, j int) bool { return o.addrs[i] < o.addrs[j] })
	return o
}

func (o *kallsymsOracle) at(addr uint64) []string {
	i := sort.Search(len(o.addrs), func(i int) bool { return o.addrs[i] > addr }) - 1
	if i < 0 {
		return nil
	}
	return o.names[o.addrs[i]]
}

// TestRawKernelFramesNamedOnHost records a program that lives in system
// calls (dd moving 1-byte blocks) and converts the trace raw, on the
// recording host: user frames stay raw for the collector, kernel frames
// are named from /proc/kallsyms — held to a plain reading of that file —
// since the kernel's symbols and KASLR offset exist only on this host.
// With RawKernel they stay raw too.
func TestRawKernelFramesNamedOnHost(t *testing.T) {
	chainTrace(t) // skips without perf events
	oracle := readKallsyms(t)
	var buf bytes.Buffer
	cmd := exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=400000")
	tr, err := tracer.Start(context.Background(), tracer.Options{Frequency: 999, Command: cmd, Streams: []io.Writer{&buf}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, rawKernel := range []bool{false, true} {
		r, err := format.NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		p, _, err := otlp.Convert(r, otlp.Options{Raw: true, RawKernel: rawKernel}, nil)
		if err != nil {
			t.Fatal(err)
		}
		conform(t, p)
		d := p.Dictionary()
		kernel, named, agree, userNamed := 0, 0, 0, 0
		for _, loc := range d.LocationTable().All() {
			if frameType(d, loc) != otlp.FrameKernel {
				if loc.Lines().Len() > 0 {
					userNamed++
				}
				continue
			}
			if loc.MappingIndex() == 0 {
				continue // a kernel module's address: no mapping
			}
			kernel++
			if loc.Lines().Len() == 0 {
				continue
			}
			named++
			name := d.StringTable().At(int(d.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex())).NameStrindex()))
			want := oracle.at(loc.Address())
			ok := false
			for _, w := range want {
				ok = ok || w == name
			}
			if ok {
				agree++
			} else if agree+5 > named {
				t.Errorf("kernel %#x: named %q, /proc/kallsyms has %q", loc.Address(), name, want)
			}
		}
		t.Logf("RawKernel=%v: %d kernel locations, %d named, %d as /proc/kallsyms names them; %d user locations named", rawKernel, kernel, named, agree, userNamed)
		if userNamed != 0 {
			t.Errorf("%d user locations named in a raw profile", userNamed)
		}
		switch {
		case kernel < 10:
			t.Fatalf("only %d kernel locations in a trace of dd bs=1: are kernel stacks recorded?", kernel)
		case rawKernel && named != 0:
			t.Errorf("RawKernel: %d kernel locations named", named)
		case !rawKernel && (named != kernel || agree != named):
			t.Errorf("%d of %d kernel locations named, %d agree with /proc/kallsyms", named, kernel, agree)
		}
	}
}
