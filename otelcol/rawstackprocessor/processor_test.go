package rawstackprocessor

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/otlpcheck"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
)

func openELF(path string) (*elf.File, error) { return elf.Open(path) }

// rawRequest records the chain fixture with the CLI and converts the
// trace to a raw OTLP profile.
func rawRequest(t testing.TB, bin string) (pprofile.Profiles, int64) {
	t.Helper()
	file := t.TempDir() + "/t.rawstack"
	cli := rawstackCLI(t)
	if out, err := execCommand(cli, "record", "-q", "-o", file, "-F", "499", "--", bin, "0.3"); err != nil {
		t.Fatalf("rawstack record: %v\n%s", err, out)
	}
	r, err := format.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, c, err := otlp.Convert(r, otlp.Options{Raw: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, c.Samples
}

func TestMalformedRequestsRejected(t *testing.T) {
	needPerf(t)
	bin, dbg := chain(t)
	c := startCollector(t, &Config{DebugDirs: []string{dbg}}, "")
	good, _ := rawRequest(t, bin)
	client := &otlp.Client{Endpoint: c.addr}
	ctx := context.Background()

	hostile := map[string]func(p pprofile.Profiles){
		"location mapping out of range": func(p pprofile.Profiles) {
			p.Dictionary().LocationTable().At(1).SetMappingIndex(1 << 30)
		},
		"negative stack index": func(p pprofile.Profiles) {
			p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).SetStackIndex(-5)
		},
		"stack location out of range": func(p pprofile.Profiles) {
			p.Dictionary().StackTable().At(1).LocationIndices().Append(1 << 20)
		},
		"attribute key out of range": func(p pprofile.Profiles) {
			p.Dictionary().AttributeTable().At(1).SetKeyStrindex(1 << 25)
		},
		"mapping ends before it starts": func(p pprofile.Profiles) {
			m := p.Dictionary().MappingTable().At(1)
			m.SetMemoryLimit(m.MemoryStart() - 1)
		},
	}
	for name, mutate := range hostile {
		p := pprofile.NewProfiles()
		good.CopyTo(p)
		mutate(p)
		data, err := otlp.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		err = client.Export(ctx, data)
		var se *otlp.StatusError
		if !errors.As(err, &se) || se.Code != 3 || !strings.Contains(se.Message, "malformed") {
			t.Errorf("%s: export returned %v, want InvalidArgument naming the malformed reference", name, err)
		} else if otlp.IsRetryable(err) {
			t.Errorf("%s: %v is retryable", name, err)
		}
	}
	// Bytes that are no protobuf at all: the receiver refuses them.
	if err := client.Export(ctx, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x01}); err == nil {
		t.Error("garbage request accepted")
	}
	if n := len(c.sink.AllProfiles()); n != 0 {
		t.Errorf("%d malformed requests reached the consumer", n)
	}
	// The pipeline still works.
	data, err := otlp.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Export(ctx, data); err != nil {
		t.Fatalf("good request after hostile ones: %v", err)
	}
	if len(c.sink.AllProfiles()) != 1 {
		t.Fatalf("good request did not come through")
	}
}

func TestUnresolvableFramesPassThrough(t *testing.T) {
	needPerf(t)
	bin, _ := chain(t)
	p, _ := rawRequest(t, bin)
	before := pprofile.NewProfiles()
	p.CopyTo(before)
	// No debug directories, no recorded paths: nothing can be found.
	proc := newSymbolizer(&Config{}, zap.NewNop())
	out, err := proc.process(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := otlp.Marshal(before)
	b, _ := otlp.Marshal(out)
	if !bytes.Equal(a, b) {
		t.Error("a profile with nothing to resolve changed")
	}
	if proc.resolved.Load() != 0 || proc.unresolved.Load() == 0 {
		t.Errorf("resolved %d, unresolved %d", proc.resolved.Load(), proc.unresolved.Load())
	}
}

// chainRequest is a raw request of the chain fixture without a
// recording: samples whose stacks are c←b←a←main at the fixture's
// symbols, in a mapping that names the binary by build id, as the agent
// sends them. The processor finds it in chain's debug directory.
func chainRequest(t testing.TB, bin string) pprofile.Profiles {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]uint64{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			addr[s.Name] = s.Value
		}
	}
	var text *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	if text == nil || addr["c"] == 0 || addr["main"] == 0 {
		t.Fatalf("%s: no text segment or no c and main", bin)
	}
	// A PIE loaded at 0x555555554000, as the kernel places one.
	const load = 0x555555554000
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{PointerSize: 8, OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteProcess(format.Process{Time: 1, Pid: 42, Name: "chain"})
	w.WriteModuleLoad(&format.ModuleLoad{Time: 1, Pid: 42, ID: 1, Base: load + text.Vaddr&^0xfff, Size: text.Memsz + text.Vaddr&0xfff,
		FileOffset: text.Off &^ 0xfff, Kind: format.ModuleELF, Path: "/srv/chain", BuildID: buildIDBytes(t, bin)})
	w.WriteStack(1, []uint64{load + addr["c"] + 1, load + addr["b"] + 5, load + addr["a"] + 5, load + addr["main"] + 5})
	for i := int64(0); i < 5; i++ {
		w.WriteSample(format.Sample{Time: 10 + i, Pid: 42, Tid: 42, Weight: 1e6, Stack: 1})
	}
	w.Close()
	r, err := format.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := otlp.Convert(r, otlp.Options{Raw: true, NoFileHash: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func buildIDBytes(t testing.TB, bin string) []byte {
	t.Helper()
	b, err := hex.DecodeString(buildID(t, bin))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestChainRequest: the request chainRequest makes is named c;b;a;main
// by the processor, from the debug directory.
func TestChainRequest(t *testing.T) {
	bin, dbg := chain(t)
	proc := newSymbolizer(&Config{DebugDirs: []string{dbg}}, zap.NewNop())
	out, err := proc.process(context.Background(), chainRequest(t, bin))
	if err != nil {
		t.Fatal(err)
	}
	if err := otlpcheck.Check(out); err != nil {
		t.Fatal(err)
	}
	d := out.Dictionary()
	s := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0)
	if got := stackNames(d, s.StackIndex()); got != "c;b;a;main" {
		t.Errorf("stack %s, want c;b;a;main", got)
	}
}

// seeds returns the real requests of testdata (README.md there).
func seeds(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("testdata/*.pb")
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed requests in testdata: %v", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

// FuzzProcess feeds arbitrary requests through the processor's request
// path, as the receiver decodes them: the processor refuses a request
// with a permanent InvalidArgument error, or passes on what conforms to
// the OTLP profiles rules (internal/otlpcheck); it never panics or hangs.
// Seeds: the real requests of testdata, a request the processor names
// (the chain fixture, found by build id), small ones with PE and htlhash
// mappings.
func FuzzProcess(f *testing.F) {
	p := pprofile.NewProfiles()
	d := p.Dictionary()
	d.StringTable().Append("", otlp.AttrBuildIDGNU, "/bin/x", otlp.AttrFrameType)
	d.AttributeTable().AppendEmpty()
	a := d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(1)
	a.Value().SetStr("0123456789abcdef0123456789abcdef01234567")
	a = d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(3)
	a.Value().SetStr("native")
	d.MappingTable().AppendEmpty()
	m := d.MappingTable().AppendEmpty()
	m.SetMemoryStart(0x400000)
	m.SetMemoryLimit(0x500000)
	m.SetFilenameStrindex(2)
	m.AttributeIndices().Append(1)
	d.LocationTable().AppendEmpty()
	l := d.LocationTable().AppendEmpty()
	l.SetMappingIndex(1)
	l.SetAddress(0x401234)
	l.AttributeIndices().Append(2)
	d.FunctionTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.StackTable().AppendEmpty().LocationIndices().Append(1)
	d.LinkTable().AppendEmpty()
	pr := p.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	pr.SetDurationNano(2)
	s := pr.Samples().AppendEmpty()
	s.SetStackIndex(1)
	s.TimestampsUnixNano().Append(1)
	seed, err := otlp.Marshal(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	// The same as a PE mapping found by PDB identity and code id, and one
	// with only an htlhash.
	pe := pprofile.NewProfiles()
	p.CopyTo(pe)
	pd := pe.Dictionary()
	pd.StringTable().Append(otlp.AttrPDBGUIDAge, otlp.AttrPECodeID, otlp.AttrBuildIDHTLHash)
	n := int32(pd.StringTable().Len())
	for i, v := range []string{"9CFFF3223893E0D74C4C44205044422E1", "6543210F1d000", "0123456789abcdef0123456789abcdef"} {
		a := pd.AttributeTable().AppendEmpty()
		a.SetKeyStrindex(n - 3 + int32(i))
		a.Value().SetStr(v)
	}
	pd.MappingTable().At(1).AttributeIndices().FromRaw([]int32{3, 4})
	if data, err := otlp.Marshal(pe); err == nil {
		f.Add(data)
	}
	pd.MappingTable().At(1).AttributeIndices().FromRaw([]int32{5})
	if data, err := otlp.Marshal(pe); err == nil {
		f.Add(data)
	}
	for _, data := range seeds(f) {
		f.Add(data)
	}
	cfg := &Config{MaxLocations: 1 << 12, RequestTimeout: 2 * time.Second}
	if _, err := exec.LookPath("cc"); err == nil {
		bin, dbg := chain(f)
		if data, err := otlp.Marshal(chainRequest(f, bin)); err == nil {
			f.Add(data)
		}
		cfg.DebugDirs = []string{dbg}
	}
	proc := newSymbolizer(cfg, zap.NewNop())
	f.Fuzz(func(t *testing.T, data []byte) {
		var u pprofile.ProtoUnmarshaler
		p, err := u.UnmarshalProfiles(data)
		if err != nil {
			return // the receiver refuses it
		}
		out, err := proc.process(context.Background(), p)
		if err != nil {
			if !consumererror.IsPermanent(err) || status.Code(err) != codes.InvalidArgument {
				t.Fatalf("refused with %v, want a permanent InvalidArgument", err)
			}
			return
		}
		if err := otlpcheck.Check(out); err != nil {
			t.Fatalf("the processor passed on a request that does not conform: %v", err)
		}
	})
}

// BenchmarkProcessor measures the processor on a raw profile of the
// chain fixture with a warm cache (every file open, every address seen):
// the steady state of a collector receiving from a fleet.
func BenchmarkProcessor(b *testing.B) {
	needPerf(b)
	bin, dbg := chain(b)
	p, samples := rawRequest(b, bin)
	proc := newSymbolizer(&Config{DebugDirs: []string{dbg}}, zap.NewNop())
	ctx := context.Background()
	warm := pprofile.NewProfiles()
	p.CopyTo(warm)
	if _, err := proc.process(ctx, warm); err != nil {
		b.Fatal(err)
	}
	if proc.resolved.Load() == 0 {
		b.Fatal("nothing resolved")
	}
	copies := make([]pprofile.Profiles, b.N)
	for i := range copies {
		copies[i] = pprofile.NewProfiles()
		p.CopyTo(copies[i])
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := proc.process(ctx, copies[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(samples)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(p.Dictionary().LocationTable().Len()-1)*float64(b.N)/b.Elapsed().Seconds(), "locations/s")
}

func execCommand(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}
