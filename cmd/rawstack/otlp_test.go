package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/format"
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
	}
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
