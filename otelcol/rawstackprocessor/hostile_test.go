//go:build linux

package rawstackprocessor

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/symbolizer/export/otlp"
)

// corruption is one way to break a request.
type corruption struct {
	name  string
	apply func(p pprofile.Profiles)
}

// indexCorruptions set an index of every kind to v: out of range (a large
// v) or negative.
func indexCorruptions(v int32) []corruption {
	d := func(p pprofile.Profiles) pprofile.ProfilesDictionary { return p.Dictionary() }
	pr := func(p pprofile.Profiles) pprofile.Profile {
		return p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	}
	last := func(n int) int { return n - 1 }
	c := []corruption{
		{"sample stack", func(p pprofile.Profiles) { pr(p).Samples().At(0).SetStackIndex(v) }},
		{"sample link", func(p pprofile.Profiles) { pr(p).Samples().At(0).SetLinkIndex(v) }},
		{"sample attribute", func(p pprofile.Profiles) { pr(p).Samples().At(0).AttributeIndices().Append(v) }},
		{"profile attribute", func(p pprofile.Profiles) { pr(p).AttributeIndices().Append(v) }},
		{"sample type string", func(p pprofile.Profiles) { pr(p).SampleType().SetTypeStrindex(v) }},
		{"period unit string", func(p pprofile.Profiles) { pr(p).PeriodType().SetUnitStrindex(v) }},
		{"stack location", func(p pprofile.Profiles) { st := d(p).StackTable(); st.At(last(st.Len())).LocationIndices().Append(v) }},
		{"location mapping", func(p pprofile.Profiles) { lt := d(p).LocationTable(); lt.At(last(lt.Len())).SetMappingIndex(v) }},
		{"location attribute", func(p pprofile.Profiles) { lt := d(p).LocationTable(); lt.At(1).AttributeIndices().Append(v) }},
		{"line function", func(p pprofile.Profiles) {
			lt := d(p).LocationTable()
			lt.At(last(lt.Len())).Lines().AppendEmpty().SetFunctionIndex(v)
		}},
		{"function name", func(p pprofile.Profiles) { d(p).FunctionTable().AppendEmpty().SetNameStrindex(v) }},
		{"function file", func(p pprofile.Profiles) { d(p).FunctionTable().AppendEmpty().SetFilenameStrindex(v) }},
		{"mapping file", func(p pprofile.Profiles) { d(p).MappingTable().At(1).SetFilenameStrindex(v) }},
		{"mapping attribute", func(p pprofile.Profiles) { d(p).MappingTable().At(1).AttributeIndices().Append(v) }},
		{"attribute key", func(p pprofile.Profiles) { at := d(p).AttributeTable(); at.At(last(at.Len())).SetKeyStrindex(v) }},
		{"attribute unit", func(p pprofile.Profiles) { at := d(p).AttributeTable(); at.At(1).SetUnitStrindex(v) }},
	}
	for i := range c {
		c[i].name = fmt.Sprintf("%s index %d", c[i].name, v)
	}
	return c
}

// otherCorruptions: stack cycles, broken mappings, hostile strings.
func otherCorruptions() []corruption {
	d := func(p pprofile.Profiles) pprofile.ProfilesDictionary { return p.Dictionary() }
	bad := []string{"../../../../../../etc/passwd", "..\\..\\..\\windows\\system32\\ntdll.dll", "\xff\xfe\xfd invalid UTF-8 \xc0\x80",
		strings.Repeat("../", 4000), "/proc/self/mem", "\x00\x00\x00"}
	var c []corruption
	c = append(c,
		corruption{"stack cycle", func(p pprofile.Profiles) {
			// A stack that goes round its locations 50000 times.
			st := d(p).StackTable().At(1).LocationIndices()
			ring := st.AsRaw()
			for i := 0; i < 50000 && len(ring) > 0; i++ {
				st.Append(ring...)
			}
		}},
		corruption{"every stack cycling through every location", func(p pprofile.Profiles) {
			n := d(p).LocationTable().Len()
			for i := 1; i < d(p).StackTable().Len(); i++ {
				st := d(p).StackTable().At(i).LocationIndices()
				for j := 0; j < 2000; j++ {
					st.Append(int32(1 + (i+j)%(n-1)))
				}
			}
		}},
		corruption{"memory_start > memory_limit", func(p pprofile.Profiles) {
			m := d(p).MappingTable().At(1)
			m.SetMemoryStart(m.MemoryLimit() + 1)
		}},
		corruption{"memory_limit 0", func(p pprofile.Profiles) { d(p).MappingTable().At(1).SetMemoryLimit(0) }},
		corruption{"duplicate strings", func(p pprofile.Profiles) { d(p).StringTable().Append(d(p).StringTable().At(1)) }},
		corruption{"timestamp outside the profile", func(p pprofile.Profiles) {
			pr := p.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
			pr.Samples().At(0).TimestampsUnixNano().Append(uint64(pr.Time()) + pr.DurationNano())
		}},
		corruption{"10000 unknown build ids", func(p pprofile.Profiles) {
			dd := d(p)
			st := dd.StackTable().At(1).LocationIndices()
			key := findString(dd.StringTable(), otlp.AttrBuildIDGNU)
			if key < 0 {
				key = int32(dd.StringTable().Len())
				dd.StringTable().Append(otlp.AttrBuildIDGNU)
			}
			for i := 0; i < 10000; i++ {
				a := dd.AttributeTable().AppendEmpty()
				a.SetKeyStrindex(key)
				a.Value().SetStr(fmt.Sprintf("%040x", 0xbad0000+i))
				m := dd.MappingTable().AppendEmpty()
				base := uint64(0x100000000 + i<<20)
				m.SetMemoryStart(base)
				m.SetMemoryLimit(base + 1<<20)
				m.AttributeIndices().Append(int32(dd.AttributeTable().Len() - 1))
				l := dd.LocationTable().AppendEmpty()
				l.SetMappingIndex(int32(dd.MappingTable().Len() - 1))
				l.SetAddress(base + 0x10)
				st.Append(int32(dd.LocationTable().Len() - 1))
			}
		}},
	)
	for _, s := range bad {
		s := s
		c = append(c,
			corruption{fmt.Sprintf("mapping file %.20q", s), func(p pprofile.Profiles) {
				dd := d(p)
				dd.StringTable().SetAt(int(dd.MappingTable().At(1).FilenameStrindex()), s)
			}},
			corruption{fmt.Sprintf("build id %.20q", s), func(p pprofile.Profiles) {
				dd := d(p)
				for _, a := range dd.AttributeTable().All() {
					if a.Value().Type() != 0 && dd.StringTable().At(int(a.KeyStrindex())) == otlp.AttrBuildIDGNU {
						a.Value().SetStr(s)
					}
				}
			}},
			corruption{fmt.Sprintf("PE identity %.20q", s), func(p pprofile.Profiles) {
				dd := d(p)
				k := int32(dd.StringTable().Len())
				dd.StringTable().Append(otlp.AttrPDBPath, otlp.AttrPDBGUIDAge, otlp.AttrPECodeID)
				for i, v := range []string{s, "9CFFF3223893E0D74C4C44205044422E1", "6543210F1d000"} {
					a := dd.AttributeTable().AppendEmpty()
					a.SetKeyStrindex(k + int32(i))
					a.Value().SetStr(v)
					dd.MappingTable().At(1).AttributeIndices().Append(int32(dd.AttributeTable().Len() - 1))
				}
			}},
			corruption{fmt.Sprintf("function name %.20q", s), func(p pprofile.Profiles) {
				dd := d(p)
				dd.StringTable().Append(s)
				f := dd.FunctionTable().AppendEmpty()
				f.SetNameStrindex(int32(dd.StringTable().Len() - 1))
				lt := dd.LocationTable()
				lt.At(lt.Len() - 1).Lines().AppendEmpty().SetFunctionIndex(int32(dd.FunctionTable().Len() - 1))
			}},
		)
	}
	return c
}

// TestHostileRequests sends a few hundred corrupted requests through the
// real Collector (the distribution built from builder-config.yaml, its
// OTLP receiver, the rawstack processor, the OTLP exporter): out-of-range
// and negative indices in every table, stack cycles, broken mappings,
// strings of ../ and invalid UTF-8, unknown build ids by the thousand,
// flipped bytes. Each is refused or passed on (conforming) within a time
// bound; then the Collector is still running and names an intact request.
func TestHostileRequests(t *testing.T) {
	otelcol := otelcolBinary(t)
	bin, dbg := chain(t)
	sinkAddr, sink := startOTLPSink(t)
	colAddr := freeAddr(t)
	config := filepath.Join(t.TempDir(), "collector.yaml")
	yaml := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
        max_recv_msg_size_mib: 16
processors:
  rawstack:
    debug_dirs: [%s]
    request_timeout: 3s
exporters:
  otlp:
    endpoint: %s
    tls: {insecure: true}
    sending_queue: {enabled: false}
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      processors: [rawstack]
      exporters: [otlp]
`, colAddr, dbg, sinkAddr)
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	col := &distribution{bin: otelcol, config: config}
	col.start(t)
	defer col.kill()
	client := &otlp.Client{Endpoint: colAddr}
	defer client.Close()

	intact, err := otlp.Marshal(chainRequest(t, bin))
	if err != nil {
		t.Fatal(err)
	}
	// The Collector is up once it takes the intact request.
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := client.Export(ctx, intact)
		cancel()
		if err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("the Collector does not take the intact request: %v\n%s", err, col.log.String())
		}
	}

	bases := map[string]pprofile.Profiles{"chain": chainRequest(t, bin)}
	var u pprofile.ProtoUnmarshaler
	for name, data := range seeds(t) {
		p, err := u.UnmarshalProfiles(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		bases[name] = p
	}
	names := make([]string, 0, len(bases))
	for n := range bases {
		names = append(names, n)
	}
	sort.Strings(names)
	var corruptions []corruption
	corruptions = append(corruptions, indexCorruptions(1<<30)...)
	corruptions = append(corruptions, indexCorruptions(-1)...)
	corruptions = append(corruptions, indexCorruptions(-1<<31)...)
	corruptions = append(corruptions, otherCorruptions()...)

	var requests []struct {
		name string
		data []byte
	}
	add := func(name string, data []byte) {
		requests = append(requests, struct {
			name string
			data []byte
		}{name, data})
	}
	for i, c := range corruptions {
		// Each corruption on two of the bases, in turn.
		for _, bn := range []string{"chain", names[i%len(names)]} {
			p := pprofile.NewProfiles()
			bases[bn].CopyTo(p)
			c.apply(p)
			data, err := otlp.Marshal(p)
			if err != nil {
				continue // pdata cannot encode it: nothing to send
			}
			add(bn+": "+c.name, data)
		}
	}
	rng := rand.New(rand.NewSource(33))
	for i := 0; i < 150; i++ {
		base := intact
		if i%2 == 1 {
			base, _ = otlp.Marshal(bases[names[i%len(names)]])
		}
		data := append([]byte(nil), base...)
		for k := 1 + rng.Intn(8); k > 0; k-- {
			data[rng.Intn(len(data))] ^= byte(1 << rng.Intn(8))
		}
		add(fmt.Sprintf("flipped bytes %d", i), data)
	}

	refused, passed := 0, 0
	start := time.Now()
	for _, r := range requests {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t0 := time.Now()
		err := client.Export(ctx, r.data)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 15*time.Second {
			t.Errorf("%s: no answer in %v: %v", r.name, time.Since(t0), err)
		}
		if testing.Verbose() {
			t.Logf("%s: %v", r.name, err)
		}
		if err != nil {
			refused++
			if otlp.IsRetryable(err) {
				t.Errorf("%s: refused as retryable (%v): a sender would retry it forever", r.name, err)
			}
		} else {
			passed++
		}
		if col.cmd.ProcessState != nil || syscall.Kill(col.cmd.Process.Pid, 0) != nil {
			t.Fatalf("the Collector died after %s:\n%s", r.name, col.log.String())
		}
	}
	t.Logf("%d corrupted requests in %v: %d refused, %d passed on", len(requests), time.Since(start).Round(time.Millisecond), refused, passed)
	if len(requests) < 300 || refused < len(requests)/2 {
		t.Errorf("%d requests, %d refused: the corruptions are not what this test means", len(requests), refused)
	}
	if strings.Contains(col.log.String(), "panic") {
		t.Errorf("the Collector's log holds a panic:\n%s", col.log.String())
	}

	// Still alive, and still naming.
	before := len(sink.AllProfiles())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := client.Export(ctx, intact); err != nil {
		t.Fatalf("the intact request after the hostile ones: %v\n%s", err, col.log.String())
	}
	all := sink.AllProfiles()
	if len(all) <= before {
		t.Fatal("the intact request did not come out of the Collector")
	}
	out := all[len(all)-1]
	s := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0)
	if got := stackNames(out.Dictionary(), s.StackIndex()); got != "c;b;a;main" {
		t.Errorf("the intact request came out as %s, want c;b;a;main", got)
	}
	if lines := strings.Count(col.log.String(), "\n"); lines > 200 {
		t.Errorf("the Collector logged %d lines for %d hostile requests: not rate-limited", lines, len(requests))
	}
}
