package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/otlpcheck"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

func TestConvertOTLP(t *testing.T) {
	testbuild.Feature(t, linux.Probe())
	bin := buildChain(t)
	dir := t.TempDir()
	// convert --to otlp runs rawstack-otlp, found on PATH here.
	helperDir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", helperDir, "../rawstack-otlp").CombinedOutput(); err != nil {
		t.Fatalf("go build rawstack-otlp: %v\n%s", err, out)
	}
	t.Setenv("PATH", helperDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	trace := filepath.Join(dir, "t.rawstack")
	var so, se bytes.Buffer
	if code := run([]string{"record", "-q", "-o", trace, "-F", "499", "--", bin, "0.3"}, &so, &se); code != 0 {
		t.Fatalf("record exited %d: %s", code, se.String())
	}
	samples := countKinds(t, trace)[format.KindSample]
	for _, raw := range []bool{false, true} {
		out := filepath.Join(dir, "t.otlp")
		args := []string{"convert", trace, "--to", "otlp", "-o", out}
		if raw {
			args = append(args, "--raw")
		}
		se.Reset()
		if code := run(args, &so, &se); code != 0 {
			t.Fatalf("%q exited %d: %s", args, code, se.String())
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var u pprofile.ProtoUnmarshaler
		p, err := u.UnmarshalProfiles(data)
		if err != nil {
			t.Fatalf("%q: output does not decode: %v", args, err)
		}
		if err := otlpcheck.Check(p); err != nil {
			t.Errorf("%q: output does not conform: %v", args, err)
		}
		if p.SampleCount() == 0 {
			t.Fatalf("%q: no samples", args)
		}
		n := 0
		for _, rp := range p.ResourceProfiles().All() {
			for _, sp := range rp.ScopeProfiles().All() {
				for _, pr := range sp.Profiles().All() {
					for _, s := range pr.Samples().All() {
						n += s.TimestampsUnixNano().Len()
					}
				}
			}
		}
		if n != samples {
			t.Errorf("%q: %d samples, the trace has %d", args, n, samples)
		}
		var names []string
		d := p.Dictionary()
		for _, f := range d.FunctionTable().All() {
			names = append(names, d.StringTable().At(int(f.NameStrindex())))
		}
		has := strings.Contains(";"+strings.Join(names, ";")+";", ";b;")
		if has == raw {
			t.Errorf("%q: functions %v", args, names)
		}
		// The on-CPU values are ns of CPU (format/SPEC.md §6.10): the 0.3 s
		// chain spent, and what pprof's cpu values add up to.
		var cpu int64
		for _, rp := range p.ResourceProfiles().All() {
			for _, sp := range rp.ScopeProfiles().All() {
				for _, pr := range sp.Profiles().All() {
					if d.StringTable().At(int(pr.SampleType().TypeStrindex())) != "cpu" {
						continue
					}
					for _, s := range pr.Samples().All() {
						for _, v := range s.Values().All() {
							cpu += v
						}
					}
				}
			}
		}
		t.Logf("%q: %v on CPU", args, time.Duration(cpu))
		if cpu < 200e6 || cpu > 450e6 {
			t.Errorf("%q: %v on CPU, the program spent 0.3s", args, time.Duration(cpu))
		}
		if !raw {
			if pcpu := pprofCPU(t, trace); pcpu != cpu {
				t.Errorf("otlp: %v on CPU, pprof %v", time.Duration(cpu), time.Duration(pcpu))
			}
		}
	}
}

// pprofCPU converts trace to pprof and returns its cpu/nanoseconds total.
func pprofCPU(t *testing.T, trace string) int64 {
	t.Helper()
	out := filepath.Join(t.TempDir(), "t.pb.gz")
	var so, se bytes.Buffer
	if code := run([]string{"convert", trace, "--to", "pprof", "-o", out}, &so, &se); code != 0 {
		t.Fatalf("convert --to pprof exited %d: %s", code, se.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.ParseData(data)
	if err != nil {
		t.Fatal(err)
	}
	var cpu int64
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			for _, s := range p.Sample {
				cpu += s.Value[i]
			}
		}
	}
	return cpu
}

func TestOTLPUsage(t *testing.T) {
	for _, args := range [][]string{
		{"convert", "x.rawstack", "--to", "pprof", "--raw"},
		{"record", "--otlp-endpoint", "localhost:4317", "--otlp-header", "nokey", "--", "true"},
		{"record", "--otlp-endpoint", "localhost:4317", "--otlp-compression", "zstd", "--", "true"},
		{"record", "--otlp-endpoint", "localhost:4317", "--otlp-queue", "0", "--", "true"},
	} {
		var so, se bytes.Buffer
		if code := run(args, &so, &se); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, se.String())
		}
	}
}
