package otlp_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/otlpcheck"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
	"github.com/rawstack/rawstack/symbolizer"
	_ "github.com/rawstack/rawstack/symbolizer/elfsrc"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
	"github.com/rawstack/rawstack/tracer"
)

var (
	traceOnce sync.Once
	traceData []byte
	traceErr  error
	traceBin  string
)

// chainTrace records the tracer's main→a→b→c fixture once for the
// package's tests and returns the trace and the binary.
func chainTrace(t testing.TB) ([]byte, string) {
	t.Helper()
	testbuild.Feature(t, linux.Probe())
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-g", "-fno-omit-frame-pointer", "-o", "{dir}/chain", "{in0}"},
		Inputs: []string{"../../../tracer/testdata/chain.c"},
		Out:    "chain",
	})
	traceOnce.Do(func() {
		var buf bytes.Buffer
		cmd := exec.Command(bin, "0.4")
		cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME=otlp-chain")
		tr, err := tracer.Start(context.Background(), tracer.Options{Frequency: 499, Command: cmd, Streams: []io.Writer{&buf}})
		if err != nil {
			traceErr = err
			return
		}
		traceErr = tr.Wait()
		traceData, traceBin = buf.Bytes(), bin
	})
	if traceErr != nil {
		t.Fatal(traceErr)
	}
	return traceData, traceBin
}

func convert(t testing.TB, data []byte, raw bool) pprofile.Profiles {
	t.Helper()
	r, err := format.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := otlp.Convert(r, otlp.Options{Raw: raw, HostName: "h1"}, func(err error) { t.Log(err) })
	if err != nil {
		t.Fatal(err)
	}
	conform(t, p)
	return p
}

// conform fails t unless p passes the OTLP conformance rules, as built
// and as a receiver decodes it.
func conform(t testing.TB, p pprofile.Profiles) {
	t.Helper()
	if err := otlpcheck.Check(p); err != nil {
		t.Fatalf("the profiles do not conform: %v", err)
	}
	b, err := otlp.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := otlpcheck.CheckBytes(b); err != nil {
		t.Fatalf("the request does not conform: %v", err)
	}
}

// roundTrip encodes p with Write and decodes it. (The otelcol module's
// tests send the same bytes to the Collector's OTLP receiver, which
// decodes them as an ExportProfilesServiceRequest; here the main module
// stays free of grpc, which pprofileotlp would pull into its tests.)
func roundTrip(t testing.TB, p pprofile.Profiles) pprofile.Profiles {
	t.Helper()
	var buf bytes.Buffer
	if err := otlp.Write(&buf, p); err != nil {
		t.Fatal(err)
	}
	var u pprofile.ProtoUnmarshaler
	p, err := u.UnmarshalProfiles(buf.Bytes())
	if err != nil {
		t.Fatalf("decoding the request: %v", err)
	}
	return p
}

// Summary is what tests compare: samples and the functions of each
// sample's stack, per process.
type Summary struct {
	Samples int
	Stacks  map[string]int // "leaf;caller;..." → samples
	Pids    []int64
}

// Summarize walks profiles as a consumer would: through the dictionary.
func Summarize(t testing.TB, p pprofile.Profiles) Summary {
	t.Helper()
	s := Summary{Stacks: map[string]int{}}
	d := p.Dictionary()
	strs := d.StringTable()
	for _, rp := range p.ResourceProfiles().All() {
		if v, ok := rp.Resource().Attributes().Get(otlp.AttrPID); ok {
			s.Pids = append(s.Pids, v.Int())
		}
		for _, sp := range rp.ScopeProfiles().All() {
			for _, pr := range sp.Profiles().All() {
				for _, smp := range pr.Samples().All() {
					n := smp.TimestampsUnixNano().Len()
					s.Samples += n
					st := d.StackTable().At(int(smp.StackIndex()))
					var names []string
					for _, li := range st.LocationIndices().All() {
						loc := d.LocationTable().At(int(li))
						if loc.Lines().Len() == 0 {
							names = append(names, "?")
						}
						for _, l := range loc.Lines().All() {
							names = append(names, strs.At(int(d.FunctionTable().At(int(l.FunctionIndex())).NameStrindex())))
						}
					}
					s.Stacks[strings.Join(names, ";")] += n
				}
			}
		}
	}
	return s
}

func TestConvertSymbolizedMatchesSymbolizer(t *testing.T) {
	data, _ := chainTrace(t)
	r, _ := format.NewReader(bytes.NewReader(data))
	want, err := symbolizer.Build(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := Summarize(t, roundTrip(t, convert(t, data, false)))
	if int64(got.Samples) != want.TotalCount() {
		t.Errorf("OTLP holds %d samples, the symbolizer's profile %d", got.Samples, want.TotalCount())
	}
	chain := 0
	for st, n := range got.Stacks {
		if strings.Contains(st, "c;b;a;main") {
			chain += n
		}
	}
	if chain < got.Samples/2 {
		t.Errorf("only %d of %d samples under c;b;a;main: %v", chain, got.Samples, got.Stacks)
	}
	if len(got.Pids) != 1 {
		t.Errorf("resources for pids %v, want one", got.Pids)
	}
}

func TestConvertRaw(t *testing.T) {
	data, bin := chainTrace(t)
	p := roundTrip(t, convert(t, data, true))
	d := p.Dictionary()
	// Only kernel frames are named (from the host's kallsyms).
	for _, loc := range d.LocationTable().All() {
		if loc.Lines().Len() != 0 && frameType(d, loc) != otlp.FrameKernel {
			t.Fatalf("raw location %#x (%s) has lines", loc.Address(), frameType(d, loc))
		}
	}
	// The fixture's mapping carries its GNU build id, as the OTel
	// profiler names it.
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var found bool
	for _, m := range d.MappingTable().All() {
		if filepath.Base(d.StringTable().At(int(m.FilenameStrindex()))) != "chain" {
			continue
		}
		for _, ai := range m.AttributeIndices().All() {
			a := d.AttributeTable().At(int(ai))
			if d.StringTable().At(int(a.KeyStrindex())) == otlp.AttrBuildIDGNU && len(a.Value().Str()) == 40 {
				found = true
			}
		}
		if m.MemoryStart() == 0 || m.MemoryLimit() <= m.MemoryStart() {
			t.Errorf("mapping range %#x-%#x", m.MemoryStart(), m.MemoryLimit())
		}
	}
	if !found {
		t.Errorf("no mapping of chain with a %s attribute", otlp.AttrBuildIDGNU)
	}
	checkResource(t, p, bin)
	sym := Summarize(t, convert(t, data, false))
	raw := Summarize(t, p)
	if raw.Samples != sym.Samples {
		t.Errorf("raw %d samples, symbolized %d", raw.Samples, sym.Samples)
	}
	// Resource attributes.
	rp := p.ResourceProfiles().At(0)
	for _, k := range []string{otlp.AttrPID, otlp.AttrExecutableName, otlp.AttrHostName, otlp.AttrOSType} {
		if _, ok := rp.Resource().Attributes().Get(k); !ok {
			t.Errorf("resource lacks %s: %v", k, rp.Resource().Attributes().AsRaw())
		}
	}
	pr := rp.ScopeProfiles().At(0).Profiles().At(0)
	// A recording's on-CPU samples weigh the ns of CPU they stand for
	// (format/SPEC.md §6.10): one value per timestamp.
	if got, unit := d.StringTable().At(int(pr.SampleType().TypeStrindex())), d.StringTable().At(int(pr.SampleType().UnitStrindex())); got != "cpu" || unit != "nanoseconds" {
		t.Errorf("sample type %s/%s, want cpu/nanoseconds", got, unit)
	}
	for _, s := range pr.Samples().All() {
		if s.Values().Len() != s.TimestampsUnixNano().Len() {
			t.Fatalf("a sample has %d values for %d timestamps", s.Values().Len(), s.TimestampsUnixNano().Len())
		}
	}
	smp := pr.Samples().At(0)
	var keys []string
	for _, ai := range smp.AttributeIndices().All() {
		keys = append(keys, d.StringTable().At(int(d.AttributeTable().At(int(ai)).KeyStrindex())))
	}
	if !slices.Contains(keys, otlp.AttrThreadID) {
		t.Errorf("sample attributes %v lack %s", keys, otlp.AttrThreadID)
	}
	if ts := smp.TimestampsUnixNano().At(0); ts < 1e18 {
		t.Errorf("timestamp %d is not wall-clock ns", ts)
	}
}

// checkResource: the chain process's resource carries what the recorder
// found about it: its executable's path, the service its environment
// names, this host's name and machine id.
func checkResource(t *testing.T, p pprofile.Profiles, bin string) {
	t.Helper()
	want := map[string]string{"process.executable.path": bin, otlp.AttrServiceName: "otlp-chain", otlp.AttrOSType: "linux"}
	if h, err := os.Hostname(); err == nil {
		want[otlp.AttrHostName] = h
	}
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		want["host.id"] = strings.TrimSpace(string(b))
	}
	for _, rp := range p.ResourceProfiles().All() {
		attrs := rp.Resource().Attributes()
		if v, ok := attrs.Get(otlp.AttrExecutableName); !ok || v.Str() != "chain" {
			continue
		}
		for k, w := range want {
			if v, ok := attrs.Get(k); !ok || v.Str() != w {
				t.Errorf("resource of chain: %s = %q, want %q (%v)", k, v.AsString(), w, attrs.AsRaw())
			}
		}
		return
	}
	t.Errorf("no resource with %s chain", otlp.AttrExecutableName)
}
