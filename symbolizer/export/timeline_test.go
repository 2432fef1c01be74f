package export_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/chrome"
	"github.com/rawstack/rawstack/symbolizer/export/firefox"
	"github.com/rawstack/rawstack/symbolizer/export/perfetto"
	"github.com/rawstack/rawstack/symbolizer/export/pprof"
	"github.com/rawstack/rawstack/symbolizer/export/speedscope"
)

// timelineProfile is handProfile with a timeline: the main thread samples
// lex-in-parse and run, a worker samples libgone and an address in no
// module, with nested spans, markers (one with a stack) and a counter.
func timelineProfile() *symbolizer.Profile {
	p := handProfile()
	const ms = int64(1e6)
	main := &symbolizer.Thread{Pid: 100, Tid: 100, Name: "app",
		Samples: []symbolizer.TimedSample{
			{Time: 10 * ms, Locs: []int{0, 1}, Weight: ms},
			{Time: 11 * ms, Locs: []int{0, 1}, Weight: ms},
			{Time: 12 * ms, Locs: []int{2, 1}, Weight: ms},
			{Time: 13 * ms, Locs: []int{2, 1}, Weight: 5 * ms, OffCPU: true},
		},
		Spans: []symbolizer.Span{
			{Name: "request", Begin: 10 * ms, End: 14 * ms, ID: 1},
			{Name: "parse", Begin: 10 * ms, End: 12 * ms, ID: 2, Parent: 1, Depth: 1, Locs: []int{1}},
			{Name: "run", Begin: 12 * ms, End: 14 * ms, ID: 3, Parent: 1, Depth: 1},
		},
		Markers: []symbolizer.Marker{{Time: 11500000, Name: "parsed"}, {Time: 13 * ms, Name: "checkpoint", Locs: []int{2, 1}}},
	}
	worker := &symbolizer.Thread{Pid: 100, Tid: 101,
		Samples: []symbolizer.TimedSample{
			{Time: 10500000, Locs: []int{3, 1}, Weight: ms},
			{Time: 11500000, Locs: []int{4}, Weight: ms},
		},
		Spans: []symbolizer.Span{{Name: "flush", Begin: 10 * ms, End: 15 * ms, ID: 4, Open: true}},
	}
	p.Timeline = &symbolizer.Timeline{
		Processes: []*symbolizer.Process{{Pid: 100, Name: "app"}},
		Threads:   []*symbolizer.Thread{main, worker},
		Counters:  []*symbolizer.CounterTrack{{Name: "queue", Points: []symbolizer.CounterPoint{{Time: 10 * ms, Value: 3}, {Time: 12 * ms, Value: 1.5}}}},
		Start:     10 * ms, End: 15 * ms,
		WallStart: 1700000000000000000,
	}
	return p
}

func TestTimelineExportersNeedTimeline(t *testing.T) {
	p := handProfile()
	var b bytes.Buffer
	for name, err := range map[string]error{
		"chrome":     chrome.Write(&b, p),
		"speedscope": speedscope.Write(&b, p, "x"),
		"firefox":    firefox.Write(&b, p),
		"perfetto":   perfetto.Write(&b, p),
	} {
		if err == nil || !strings.Contains(err.Error(), "timeline") {
			t.Errorf("%s without a timeline: %v", name, err)
		}
	}
}

func TestChromeGolden(t *testing.T) {
	var b bytes.Buffer
	if err := chrome.Write(&b, timelineProfile()); err != nil {
		t.Fatal(err)
	}
	golden(t, "chrome.golden", b.Bytes())
	var tr struct {
		TraceEvents []map[string]any          `json:"traceEvents"`
		StackFrames map[string]map[string]any `json:"stackFrames"`
		Samples     []map[string]any          `json:"samples"`
	}
	if err := json.Unmarshal(b.Bytes(), &tr); err != nil {
		t.Fatal(err)
	}
	// Every sample's node walks up to a root; the leaf of the first is
	// the inlined lex, its caller parse, then main.
	var path []string
	for id := tr.Samples[0]["sf"].(string); id != ""; {
		n := tr.StackFrames[id]
		path = append(path, n["name"].(string))
		id, _ = n["parent"].(string)
	}
	if got := strings.Join(path, " <- "); got != "lex <- parse <- main" {
		t.Errorf("first sample's stack %s", got)
	}
	phases := map[string]int{}
	for _, e := range tr.TraceEvents {
		phases[e["ph"].(string)]++
	}
	if phases["X"] != 4 || phases["i"] != 2 || phases["C"] != 2 || phases["M"] != 3 {
		t.Errorf("event phases %v", phases)
	}
}

func TestSpeedscopeGolden(t *testing.T) {
	var b bytes.Buffer
	if err := speedscope.Write(&b, timelineProfile(), "app"); err != nil {
		t.Fatal(err)
	}
	golden(t, "speedscope.golden", b.Bytes())
	var f speedscope.File
	if err := json.Unmarshal(b.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	checkSpeedscope(t, &f)
	if len(f.Profiles) != 4 {
		t.Fatalf("%d profiles, want sampled and evented for each of 2 threads", len(f.Profiles))
	}
	s := f.Profiles[0]
	var names []string
	for _, i := range s.Samples[0] {
		names = append(names, f.Shared.Frames[i].Name)
	}
	if got := strings.Join(names, ";"); got != "main;parse;lex" {
		t.Errorf("first sample root first: %s", got)
	}
}

// checkSpeedscope checks what the file format schema requires and what
// speedscope's importer relies on: frame indices in range, one weight per
// sample, evented profiles' events well nested and in time order.
func checkSpeedscope(t *testing.T, f *speedscope.File) {
	t.Helper()
	if f.Schema != speedscope.Schema {
		t.Errorf("$schema %q", f.Schema)
	}
	for _, p := range f.Profiles {
		switch p.Type {
		case "sampled":
			if len(p.Samples) != len(p.Weights) {
				t.Errorf("%s: %d samples, %d weights", p.Name, len(p.Samples), len(p.Weights))
			}
			for _, s := range p.Samples {
				for _, i := range s {
					if i < 0 || i >= len(f.Shared.Frames) {
						t.Fatalf("%s: frame %d out of range", p.Name, i)
					}
				}
			}
		case "evented":
			var open []int
			last := int64(math.MinInt64)
			for _, e := range p.Events {
				if e.At < last || e.At < p.StartValue || e.At > p.EndValue {
					t.Fatalf("%s: event %+v out of order or range", p.Name, e)
				}
				last = e.At
				if e.Type == "O" {
					open = append(open, e.Frame)
				} else if len(open) == 0 || open[len(open)-1] != e.Frame {
					t.Fatalf("%s: close %+v does not match open %v", p.Name, e, open)
				} else {
					open = open[:len(open)-1]
				}
			}
			if len(open) != 0 {
				t.Errorf("%s: %d frames left open", p.Name, len(open))
			}
		default:
			t.Errorf("profile type %q", p.Type)
		}
	}
}

func TestFirefoxGolden(t *testing.T) {
	var b bytes.Buffer
	if err := firefox.Write(&b, timelineProfile()); err != nil {
		t.Fatal(err)
	}
	golden(t, "firefox.golden", b.Bytes())
	checkGecko(t, b.Bytes(), "main;parse;lex")
}

// checkGecko validates a Gecko profile against the types of the Firefox
// Profiler's src/types/gecko-profile.ts: the required top-level and meta
// fields, each table's schema and row width, every index in range, and
// the first sample's stack (root first, ";"-joined) when want is set.
func checkGecko(t *testing.T, data []byte, want string) {
	t.Helper()
	var g map[string]any
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"meta", "libs", "threads", "pausedRanges", "processes", "sources"} {
		if _, ok := g[k]; !ok {
			t.Errorf("no %q", k)
		}
	}
	meta := g["meta"].(map[string]any)
	for _, k := range []string{"version", "startTime", "shutdownTime", "categories", "markerSchema", "interval", "stackwalk", "debug", "gcpoison", "asyncstack", "processType"} {
		if _, ok := meta[k]; !ok {
			t.Errorf("meta has no %q", k)
		}
	}
	ncat := len(meta["categories"].([]any))
	schema := func(tab map[string]any, names ...string) [][]any {
		s := tab["schema"].(map[string]any)
		if len(s) != len(names) {
			t.Fatalf("schema %v, want %v", s, names)
		}
		for i, n := range names {
			if s[n] != float64(i) {
				t.Fatalf("schema %v: %s is not column %d", s, n, i)
			}
		}
		var rows [][]any
		for _, r := range tab["data"].([]any) {
			row := r.([]any)
			if len(row) != len(names) {
				t.Fatalf("row %v has %d columns, want %d", row, len(row), len(names))
			}
			rows = append(rows, row)
		}
		return rows
	}
	idx := func(v any, n int, what string) int {
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) || f < 0 || int(f) >= n {
			t.Fatalf("%s index %v out of [0,%d)", what, v, n)
		}
		return int(f)
	}
	for i, th := range g["threads"].([]any) {
		th := th.(map[string]any)
		for _, k := range []string{"name", "registerTime", "processType", "unregisterTime", "tid", "pid", "stringTable"} {
			if _, ok := th[k]; !ok {
				t.Errorf("thread %d has no %q", i, k)
			}
		}
		strs := th["stringTable"].([]any)
		frames := schema(th["frameTable"].(map[string]any), "location", "relevantForJS", "innerWindowID", "implementation", "line", "column", "category", "subcategory")
		for _, f := range frames {
			idx(f[0], len(strs), "frame location string")
			idx(f[6], ncat, "frame category")
		}
		stacks := schema(th["stackTable"].(map[string]any), "prefix", "frame")
		for si, s := range stacks {
			if s[0] != nil && idx(s[0], si, "stack prefix") >= si {
				t.Fatal("stack prefix not before the stack")
			}
			idx(s[1], len(frames), "stack frame")
		}
		samples := schema(th["samples"].(map[string]any), "stack", "time", "eventDelay")
		last := -1.0
		for _, s := range samples {
			if s[0] != nil {
				idx(s[0], len(stacks), "sample stack")
			}
			if s[1].(float64) < last {
				t.Fatal("samples out of time order")
			}
			last = s[1].(float64)
		}
		for _, m := range schema(th["markers"].(map[string]any), "name", "startTime", "endTime", "phase", "category", "data") {
			idx(m[0], len(strs), "marker name")
			idx(m[4], ncat, "marker category")
			switch m[3] {
			case 0.0:
				if m[2] != nil {
					t.Errorf("instant marker with an end %v", m)
				}
			case 1.0:
				if m[2] == nil || m[2].(float64) < m[1].(float64) {
					t.Errorf("interval marker %v", m)
				}
			default:
				t.Errorf("marker phase %v", m[3])
			}
		}
		if i == 0 && want != "" && len(samples) > 0 {
			var names []string
			for s := samples[0][0]; s != nil; s = stacks[int(s.(float64))][0] {
				f := frames[int(stacks[int(s.(float64))][1].(float64))]
				names = append([]string{strs[int(f[0].(float64))].(string)}, names...)
			}
			if got := strings.Join(names, ";"); got != want {
				t.Errorf("first sample's stack %s, want %s", got, want)
			}
		}
	}
}

func TestPerfettoGolden(t *testing.T) {
	var b bytes.Buffer
	if err := perfetto.Write(&b, timelineProfile()); err != nil {
		t.Fatal(err)
	}
	golden(t, "perfetto.golden", b.Bytes())
	tr := decodePerfetto(t, b.Bytes())
	if len(tr.samples) != 6 {
		t.Fatalf("%d perf samples", len(tr.samples))
	}
	if got := tr.stackOf(tr.samples[0].callstack); got != "main;parse;lex" {
		t.Errorf("first sample's callstack %s", got)
	}
	if got := tr.stackOf(tr.samples[4].callstack); got != "main;libgone.so+0x123" {
		t.Errorf("worker's first sample callstack %s", got)
	}
	if tr.threads["app"] != 100 || tr.slices["request"] != 1 || tr.slices["parse"] != 1 || tr.slices["flush"] != 1 || tr.instants["checkpoint"] != 1 {
		t.Errorf("threads %v slices %v instants %v", tr.threads, tr.slices, tr.instants)
	}
	if fmt.Sprint(tr.counters["queue"]) != "[3 1.5]" {
		t.Errorf("counter values %v", tr.counters)
	}
}

// perfettoTrace is what decodePerfetto read back.
type perfettoTrace struct {
	funcs     map[uint64]string
	frames    map[uint64]uint64   // frame iid → function name iid
	stacks    map[uint64][]uint64 // callstack iid → frame iids
	samples   []perfSample
	threads   map[string]uint64 // thread name → tid
	slices    map[string]int    // slice name → count (balanced)
	instants  map[string]int
	counters  map[string][]float64
	trackName map[uint64]string
}

type perfSample struct{ pid, tid, callstack uint64 }

func (tr *perfettoTrace) stackOf(id uint64) string {
	var names []string
	for _, f := range tr.stacks[id] {
		names = append(names, tr.funcs[tr.frames[f]])
	}
	return strings.Join(names, ";")
}

// fields decodes one message into field number → raw values (varints as
// uint64, length-delimited as []byte, fixed64 as uint64).
func fields(t *testing.T, b []byte) map[protowire.Number][]any {
	t.Helper()
	out := map[protowire.Number][]any{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				t.Fatal(protowire.ParseError(n))
			}
			out[num] = append(out[num], v)
			b = b[n:]
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				t.Fatal(protowire.ParseError(n))
			}
			out[num] = append(out[num], v)
			b = b[n:]
		case protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			if n < 0 {
				t.Fatal(protowire.ParseError(n))
			}
			out[num] = append(out[num], v)
			b = b[n:]
		default:
			t.Fatalf("field %d: unexpected wire type %d", num, typ)
		}
	}
	return out
}

func one(m map[protowire.Number][]any, f protowire.Number) uint64 {
	if v := m[f]; len(v) == 1 {
		return v[0].(uint64)
	}
	return 0
}

func str(m map[protowire.Number][]any, f protowire.Number) string {
	if v := m[f]; len(v) == 1 {
		return string(v[0].([]byte))
	}
	return ""
}

// decodePerfetto decodes a trace with the field numbers of the published
// protos (written out here again, independently of the encoder) and checks
// what trace_processor requires: one sequence whose first packet clears
// the incremental state, interned ids defined before use, a callstack's
// frames outermost first, slices balanced per track.
func decodePerfetto(t *testing.T, b []byte) *perfettoTrace {
	t.Helper()
	tr := &perfettoTrace{funcs: map[uint64]string{}, frames: map[uint64]uint64{}, stacks: map[uint64][]uint64{},
		threads: map[string]uint64{}, slices: map[string]int{}, instants: map[string]int{}, counters: map[string][]float64{},
		trackName: map[uint64]string{}}
	open := map[uint64][]string{}
	trace := fields(t, b)
	for i, raw := range trace[1] { // Trace.packet
		p := fields(t, raw.([]byte))
		if one(p, 10) != 1 { // trusted_packet_sequence_id
			t.Fatalf("packet %d on sequence %d", i, one(p, 10))
		}
		flags := one(p, 13)
		if i == 0 && flags != 1 || i > 0 && flags != 2 {
			t.Fatalf("packet %d sequence flags %d", i, flags)
		}
		if d := p[12]; len(d) == 1 { // interned_data
			in := fields(t, d[0].([]byte))
			for _, f := range in[5] { // function_names
				s := fields(t, f.([]byte))
				tr.funcs[one(s, 1)] = str(s, 2)
			}
			maps := map[uint64]bool{}
			for _, f := range in[19] { // mappings
				maps[one(fields(t, f.([]byte)), 1)] = true
			}
			for _, f := range in[6] { // frames
				fr := fields(t, f.([]byte))
				if _, ok := tr.funcs[one(fr, 2)]; !ok {
					t.Fatalf("frame %d names function iid %d, not interned", one(fr, 1), one(fr, 2))
				}
				if m := one(fr, 3); m != 0 && !maps[m] {
					t.Fatalf("frame %d in mapping %d, not interned", one(fr, 1), m)
				}
				tr.frames[one(fr, 1)] = one(fr, 2)
			}
			for _, c := range in[7] { // callstacks
				cs := fields(t, c.([]byte))
				var ids []uint64
				for _, f := range cs[2] {
					if _, ok := tr.frames[f.(uint64)]; !ok {
						t.Fatalf("callstack %d has frame %d, not interned", one(cs, 1), f)
					}
					ids = append(ids, f.(uint64))
				}
				tr.stacks[one(cs, 1)] = ids
			}
		}
		if d := p[66]; len(d) == 1 { // perf_sample
			s := fields(t, d[0].([]byte))
			ps := perfSample{one(s, 2), one(s, 3), one(s, 4)}
			if _, ok := tr.stacks[ps.callstack]; !ok && ps.callstack != 0 {
				t.Fatalf("sample %+v: callstack not interned", ps)
			}
			if len(p[8]) != 1 {
				t.Fatal("sample without a timestamp")
			}
			tr.samples = append(tr.samples, ps)
		}
		if d := p[60]; len(d) == 1 { // track_descriptor
			td := fields(t, d[0].([]byte))
			if th := td[4]; len(th) == 1 {
				thd := fields(t, th[0].([]byte))
				tr.threads[str(thd, 5)] = one(thd, 2)
			}
			tr.trackName[one(td, 1)] = str(td, 2)
		}
		if d := p[11]; len(d) == 1 { // track_event
			ev := fields(t, d[0].([]byte))
			track := one(ev, 11)
			switch one(ev, 9) {
			case 1:
				open[track] = append(open[track], str(ev, 23))
			case 2:
				st := open[track]
				if len(st) == 0 {
					t.Fatalf("slice end on track %d with none open", track)
				}
				tr.slices[st[len(st)-1]]++
				open[track] = st[:len(st)-1]
			case 3:
				tr.instants[str(ev, 23)]++
			case 4:
				v := ev[44]
				if len(v) != 1 {
					t.Fatal("counter event without double_counter_value")
				}
				name := tr.trackName[track]
				tr.counters[name] = append(tr.counters[name], math.Float64frombits(v[0].(uint64)))
			}
		}
	}
	var left []string
	for k, v := range open {
		if len(v) > 0 {
			left = append(left, fmt.Sprint(k, v))
		}
	}
	sort.Strings(left)
	if len(left) > 0 {
		t.Errorf("slices left open: %v", left)
	}
	return tr
}

// TestPprofTimeline: the profile rawstack view serves splits samples by
// thread and time bucket with the labels pprof's tag filters use.
func TestPprofTimeline(t *testing.T) {
	var b bytes.Buffer
	if err := pprof.WriteTimeline(&b, timelineProfile(), 2e6); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, s := range p.Sample {
		th := s.Label[pprof.ThreadTag]
		tm := s.NumLabel[pprof.TimeTag]
		if len(th) != 1 || len(tm) != 1 || s.NumUnit[pprof.TimeTag][0] != "nanoseconds" {
			t.Fatalf("sample labels %v %v %v", s.Label, s.NumLabel, s.NumUnit)
		}
		got[fmt.Sprintf("%s@%d:%s", th[0], tm[0], s.Location[0].Line[0].Function.Name)] += s.Value[0]
	}
	want := map[string]int64{
		"app (100)@0:lex": 2, "app (100)@2000000:run": 2,
		"thread (101)@0:libgone.so+0x123": 1, "thread (101)@0:0xdead": 1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("samples by thread@bucket:leaf %v, want %v", got, want)
	}
}
