package otelspan_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux"
	"github.com/rawstack/rawstack/platform/linux/ebpf"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/chrome"
	"github.com/rawstack/rawstack/symbolizer/export/firefox"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
	"github.com/rawstack/rawstack/symbolizer/export/perfetto"
	"github.com/rawstack/rawstack/symbolizer/export/speedscope"
)

var handlers = []string{"main.handlerA", "main.handlerB", "main.handlerC", "main.handlerD"}

// minLinkedShare is the share of each handler's in-span CPU that must be
// linked to its own spans (issue 30's goal). Seen: 0.996-1.000 per
// handler, perf and eBPF, on a loaded 2-core VM (one sample in 266 missed).
const minLinkedShare = 0.98

// TestGoroutineLinks runs testdata/requests: four goroutines on two Ps,
// not locked to threads, yielding every few µs, each serving requests in
// a function of its own, each request in a span linked to an
// OpenTelemetry span. Each handler's in-span CPU must be linked to that
// handler's own spans, read back from pprof's trace_id/span_id labels
// and from the OTLP links, as `rawstack convert --to pprof` and
// `--to otlp` write them. It runs with both back ends, through
// otelspan.Start and through a wrapped SDK TracerProvider, and from a
// binary built -ldflags="-s -w" (no DWARF: the tracer learns its
// runtime's layout by itself). The Perfetto export must draw each
// request's span on its handler's goroutine track.
func TestGoroutineLinks(t *testing.T) {
	if err := linux.Probe(); err != nil {
		if errors.Is(err, platform.ErrNotSupported) {
			testbuild.Skip(t, "perf_event_open: %v", err)
		}
		t.Fatal(err)
	}
	plain := buildRequests(t, false)
	stripped := buildRequests(t, true)
	for _, c := range []struct {
		backend, mode string
		stripped      bool
	}{
		{"perf", "start", false},
		{"perf", "wrap", true},
		{"ebpf", "start", true},
		{"ebpf", "wrap", false},
	} {
		name := c.backend + "/" + c.mode
		if c.stripped {
			name += "/-s-w"
		}
		t.Run(name, func(t *testing.T) {
			if c.backend == "ebpf" {
				testbuild.Feature(t, ebpf.Probe())
			}
			bin := plain
			if c.stripped {
				bin = stripped
			}
			trace := filepath.Join(t.TempDir(), "requests.rawstack")
			cmd := exec.Command(bin, "-o", trace, "-backend", c.backend, "-mode", c.mode, "-requests", "40")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s", bin, err, stderr.String())
			}
			spans := map[string]string{} // span id → handler
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				var fn, tid, sid string
				if _, err := fmt.Sscanf(l, "span %s %s %s", &fn, &tid, &sid); err != nil {
					t.Fatalf("fixture printed %q", l)
				}
				spans[sid] = fn
			}
			data, err := os.ReadFile(trace)
			if err != nil {
				t.Fatal(err)
			}
			checkPprofLinks(t, data, spans)
			checkOTLPLinks(t, data, spans)
			if !c.stripped && c.backend == "perf" {
				checkPerfettoTracks(t, data, spans)
			}
		})
	}
}

func buildRequests(t *testing.T, stripped bool) string {
	t.Helper()
	args := []string{"build", "-o", "{dir}/requests"}
	if stripped {
		args = append(args, `-ldflags=-s -w`)
	}
	// The fixture links the tracer and the eBPF back end: every package
	// it builds from keys the cache.
	return testbuild.Build(t, testbuild.Cmd{
		Tool: "go", Args: append(args, "."),
		Inputs: []string{"testdata/requests", ".", "..", "../../platform", "../../format", "../../internal", "../../arch", "../../go.mod", "../../go.sum"},
		Out:    "requests",
		Env:    []string{"CGO_ENABLED=0", "GOFLAGS="}, Dir: mustAbs(t, "testdata/requests"),
	})
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// inSpan returns the handler whose in-span work a stack (function names,
// leaf first) is, "" for none: a handler's frame, and none of the code
// that opens, ends or records the spans.
func inSpan(names []string) string {
	h := ""
	for _, n := range names {
		switch {
		case strings.Contains(n, "rawstack/tracer"), strings.Contains(n, "go.opentelemetry.io"),
			strings.HasPrefix(n, "main.(*handler)"), strings.HasPrefix(n, "main.note"), strings.HasPrefix(n, "crypto/"):
			return ""
		}
		for _, f := range handlers {
			if n == f {
				h = f
			}
		}
	}
	return h
}

type share struct{ linked, total int64 }

func checkShares(t *testing.T, from string, shares map[string]*share) {
	t.Helper()
	for _, h := range handlers {
		s := shares[h]
		if s == nil || s.total < 30 {
			t.Errorf("%s: %s has %v samples in its spans: too few to tell", from, h, s)
			continue
		}
		got := float64(s.linked) / float64(s.total)
		t.Logf("%s: %s: %d of %d in-span samples linked to its own spans (%.3f)", from, h, s.linked, s.total, got)
		if got < minLinkedShare {
			t.Errorf("%s: %s: %.3f of its in-span CPU linked to its own spans, want >= %.2f", from, h, got, minLinkedShare)
		}
	}
}

// checkPprofLinks converts the trace as `convert --to pprof` does and
// reads each sample's span_id label.
func checkPprofLinks(t *testing.T, data []byte, spans map[string]string) {
	pp := pprofOf(t, data)
	shares := map[string]*share{}
	for _, s := range pp.Sample {
		var names []string
		for _, l := range s.Location {
			for _, ln := range l.Line {
				names = append(names, ln.Function.Name)
			}
		}
		h := inSpan(names)
		if h == "" {
			continue
		}
		if shares[h] == nil {
			shares[h] = &share{}
		}
		n := s.Value[0] // samples
		shares[h].total += n
		if sids := s.Label[symbolizer.LabelSpanID]; len(sids) == 1 && spans[sids[0]] == h {
			shares[h].linked += n
		}
	}
	checkShares(t, "pprof", shares)
}

// checkOTLPLinks converts the trace as `convert --to otlp` does and reads
// each sample's link.
func checkOTLPLinks(t *testing.T, data []byte, spans map[string]string) {
	r, err := format.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := otlp.Convert(r, otlp.Options{NoFileHash: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := p.Dictionary()
	strs := d.StringTable()
	shares := map[string]*share{}
	for _, rp := range p.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, pr := range sp.Profiles().All() {
				for _, smp := range pr.Samples().All() {
					var names []string
					for _, li := range d.StackTable().At(int(smp.StackIndex())).LocationIndices().All() {
						for _, l := range d.LocationTable().At(int(li)).Lines().All() {
							names = append(names, strs.At(int(d.FunctionTable().At(int(l.FunctionIndex())).NameStrindex())))
						}
					}
					h := inSpan(names)
					if h == "" {
						continue
					}
					if shares[h] == nil {
						shares[h] = &share{}
					}
					n := int64(smp.TimestampsUnixNano().Len())
					shares[h].total += n
					if smp.LinkIndex() != 0 {
						l := d.LinkTable().At(int(smp.LinkIndex()))
						sid := l.SpanID()
						if spans[hex.EncodeToString(sid[:])] == h {
							shares[h].linked += n
						}
					}
				}
			}
		}
	}
	checkShares(t, "otlp", shares)
}

// checkPerfettoTracks exports the trace to Perfetto and reads the
// protobuf back: every request's span is a slice on a track named
// "goroutine N main.handlerX" of its own handler, annotated with its
// span id, and each handler's spans share one track.
func checkPerfettoTracks(t *testing.T, data []byte, spans map[string]string) {
	r, err := format.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	prof, err := symbolizer.Build(r, &symbolizer.Options{NoDebuginfod: true, Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := perfetto.Write(&b, prof); err != nil {
		t.Fatal(err)
	}
	tracks := map[uint64]string{} // uuid → name
	type slice struct {
		track  uint64
		spanID string
	}
	var slices []slice
	for _, pkt := range pbFields(t, b.Bytes())[1] {
		p := pbFields(t, pkt)
		for _, d := range p[60] { // track_descriptor
			td := pbFields(t, d)
			if len(td[2]) == 1 {
				tracks[pbUint(td[1])] = string(td[2][0])
			}
		}
		for _, e := range p[11] { // track_event
			ev := pbFields(t, e)
			if pbUint(ev[9]) != 1 { // TYPE_SLICE_BEGIN
				continue
			}
			s := slice{track: pbUint(ev[11])}
			for _, a := range ev[4] { // debug_annotations
				da := pbFields(t, a)
				if len(da[10]) == 1 && string(da[10][0]) == "span_id" && len(da[6]) == 1 {
					s.spanID = string(da[6][0])
				}
			}
			slices = append(slices, s)
		}
	}
	trackOf := map[string]uint64{} // handler → its track
	found := 0
	for _, s := range slices {
		h, ok := spans[s.spanID]
		if !ok {
			continue
		}
		found++
		name := tracks[s.track]
		var goid uint64
		var fn string
		if _, err := fmt.Sscanf(name, "goroutine %d %s", &goid, &fn); err != nil || fn != h {
			t.Errorf("span %s of %s on track %q, want its goroutine's", s.spanID, h, name)
			continue
		}
		if tr, ok := trackOf[h]; ok && tr != s.track {
			t.Errorf("%s's spans on two tracks, %q and %q", h, tracks[tr], name)
		}
		trackOf[h] = s.track
	}
	if found != len(spans) {
		t.Errorf("perfetto: %d of the %d requests' spans found", found, len(spans))
	}
	t.Logf("perfetto: %d request spans on %d goroutine tracks", found, len(trackOf))

	// The other timelines draw the same tracks: Chrome's JSON (each span,
	// with its span_id, on the handler's goroutine's thread), Firefox's
	// threads and speedscope's evented profiles (a goroutine's spans,
	// one per request).
	ct, err := chrome.Convert(prof)
	if err != nil {
		t.Fatal(err)
	}
	names := map[uint32]string{}
	for _, e := range ct.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			names[e.Tid], _ = e.Args["name"].(string)
		}
	}
	chromeFound := 0
	for _, e := range ct.TraceEvents {
		if sid, _ := e.Args["span_id"].(string); e.Ph == "X" && spans[sid] != "" {
			chromeFound++
			if !strings.HasPrefix(names[e.Tid], "goroutine ") || !strings.HasSuffix(names[e.Tid], " "+spans[sid]) {
				t.Errorf("chrome: span %s of %s on thread %q", sid, spans[sid], names[e.Tid])
			}
		}
	}
	if chromeFound != len(spans) {
		t.Errorf("chrome: %d of the %d requests' spans found", chromeFound, len(spans))
	}
	ff, err := firefox.Convert(prof)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := speedscope.Convert(prof, "requests")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range handlers {
		var ffSpans, ssEvents int
		for _, th := range ff.Threads {
			if strings.HasPrefix(th.Name, "goroutine ") && strings.HasSuffix(th.Name, " "+h) {
				ffSpans += len(th.Markers.Data)
			}
		}
		for _, p := range ss.Profiles {
			if p.Type == "evented" && strings.HasPrefix(p.Name, "goroutine ") && strings.HasSuffix(p.Name, " "+h+" spans") {
				ssEvents += len(p.Events)
			}
		}
		if ffSpans != len(spans)/len(handlers) || ssEvents != 2*len(spans)/len(handlers) {
			t.Errorf("%s's goroutine track: %d Firefox markers, %d speedscope events; want a span per request", h, ffSpans, ssEvents)
		}
	}
}

// pbFields decodes one protobuf message: the bytes of each length-
// delimited field, and varints as their 8-byte little-endian encoding.
func pbFields(t *testing.T, b []byte) map[protowire.Number][][]byte {
	t.Helper()
	m := map[protowire.Number][][]byte{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("protobuf: bad tag")
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				t.Fatalf("protobuf: bad bytes field %d", num)
			}
			m[num] = append(m[num], v)
			b = b[n:]
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				t.Fatalf("protobuf: bad varint field %d", num)
			}
			m[num] = append(m[num], protowire.AppendFixed64(nil, v))
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				t.Fatalf("protobuf: bad field %d", num)
			}
			b = b[n:]
		}
	}
	return m
}

func pbUint(v [][]byte) uint64 {
	if len(v) != 1 || len(v[0]) != 8 {
		return 0
	}
	x, _ := protowire.ConsumeFixed64(v[0])
	return x
}
