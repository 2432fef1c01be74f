//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/otlpcheck"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/internal/wine"
	"github.com/rawstack/rawstack/platform/linux"
)

// The capability matrix, back end × output (README, "What works where"):
// each back end that runs on these machines records a program with a
// known call chain; the trace is converted to every output; every output
// must name the chain and give the same on-CPU total, in nanoseconds,
// as the trace's samples weigh. The OTLP sink (streaming into the
// Collector's receiver) is the otelcol module's TestMatrixOTLPSink.

// weighted is one stack of an output, root first, and what it weighs.
type weighted struct {
	names []string
	w     int64
}

// matrixOutputs are the outputs, each with a reader of what it holds.
// Perfetto's perf samples carry no weight: its total is the count.
var matrixOutputs = []struct {
	to     string
	read   func(t *testing.T, b []byte) []weighted
	counts bool
}{
	{"folded", readFolded, false},
	{"pprof", readPprof, false},
	{"otlp", readOTLP, false},
	{"chrome", readChrome, false},
	{"firefox", readFirefox, false},
	{"speedscope", readSpeedscope, false},
	{"perfetto", readPerfetto, true},
}

// matrixTrace is one back end's recording.
type matrixTrace struct {
	trace string
	chain []string // root first
	sym   []string // symbolization flags
}

func TestMatrix(t *testing.T) {
	helperDir := t.TempDir() // convert --to otlp runs rawstack-otlp
	if out, err := exec.Command("go", "build", "-o", helperDir, "../rawstack-otlp").CombinedOutput(); err != nil {
		t.Fatalf("go build rawstack-otlp: %v\n%s", err, out)
	}
	t.Setenv("PATH", helperDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, be := range []struct {
		name   string
		record func(t *testing.T) matrixTrace
	}{
		{"perf", func(t *testing.T) matrixTrace { return matrixLinux(t, "perf") }},
		{"ebpf", func(t *testing.T) matrixTrace { return matrixLinux(t, "ebpf") }},
		{"windows", matrixWine},
	} {
		t.Run(be.name, func(t *testing.T) {
			mt := be.record(t)
			count, total := traceTotals(t, mt.trace)
			if count == 0 {
				t.Fatal("the trace holds no on-CPU samples")
			}
			t.Logf("trace: %d on-CPU samples weighing %d ns", count, total)
			dir := t.TempDir()
			for _, o := range matrixOutputs {
				t.Run(o.to, func(t *testing.T) {
					out := filepath.Join(dir, "out."+o.to)
					args := append([]string{"convert", mt.trace, "--to", o.to, "-o", out, "--no-debuginfod"}, mt.sym...)
					if o.to == "folded" {
						args = append(args, "--value", "cpu")
					}
					var so, se bytes.Buffer
					if code := run(args, &so, &se); code != 0 {
						t.Fatalf("%q: exit %d: %s", args, code, se.String())
					}
					b, err := os.ReadFile(out)
					if err != nil {
						t.Fatal(err)
					}
					want := total
					if o.counts {
						want = count
					}
					checkMatrixOutput(t, o.read(t, b), mt.chain, want)
				})
			}
			t.Run("report", func(t *testing.T) {
				var rep bytes.Buffer
				args := append([]string{mt.trace, "--top", "40", "--no-debuginfod"}, mt.sym...)
				if err := runReport(args, &rep, io.Discard); err != nil {
					t.Fatalf("report: %v", err)
				}
				for _, fn := range mt.chain {
					if !strings.Contains(rep.String(), " "+fn+"  [") {
						t.Errorf("report does not name %s:\n%s", fn, rep.String())
					}
				}
			})
		})
	}
}

// checkMatrixOutput holds an output to the chain (in order, in at least
// half of the weight) and to the trace's total (±0.5%: formats that store
// milliseconds round).
func checkMatrixOutput(t *testing.T, stacks []weighted, chain []string, total int64) {
	t.Helper()
	var sum, inChain int64
	for _, s := range stacks {
		sum += s.w
		if hasChain(s.names, chain) {
			inChain += s.w
		}
	}
	if d := float64(sum-total) / float64(total); d < -0.005 || d > 0.005 {
		t.Errorf("total %d, the trace's samples give %d (%+.2f%%)", sum, total, 100*d)
	}
	if inChain*2 < sum {
		var some []string
		for i, s := range stacks {
			if i == 5 {
				break
			}
			some = append(some, strings.Join(s.names, ";"))
		}
		t.Errorf("chain %v in %d of %d ns; stacks: %q", chain, inChain, sum, some)
	}
}

// hasChain reports whether names (root first) hold chain in order, each
// caller directly followed by its callee.
func hasChain(names, chain []string) bool {
	for i := 0; i+len(chain) <= len(names); i++ {
		ok := true
		for j, c := range chain {
			if names[i+j] != c {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// traceTotals counts the trace's on-CPU samples and sums their weights.
func traceTotals(t *testing.T, path string) (count, total int64) {
	t.Helper()
	r, err := format.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return count, total
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == format.KindSample && ev.Sample.Flags&format.SampleOffCPU == 0 {
			count++
			total += int64(ev.Sample.Weight)
		}
	}
}

// matrixLinux records the main→a→b→c fixture with back end be.
func matrixLinux(t *testing.T, be string) matrixTrace {
	probe := linux.Probe
	if be == "ebpf" {
		probe = linux.ProbeBPF
	}
	testbuild.Feature(t, probe())
	bin := testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   []string{"-O2", "-g", "-fno-omit-frame-pointer", "-o", "{dir}/chain", "{in0}"},
		Inputs: []string{"../../tracer/testdata/chain.c"},
		Out:    "chain",
	})
	trace := filepath.Join(t.TempDir(), "t.rawstack")
	var so, se bytes.Buffer
	args := []string{"record", "-q", "--backend", be, "-o", trace, "-F", "499", "--", bin, "0.6"}
	if code := run(args, &so, &se); code != 0 {
		t.Fatalf("%q exited %d: %s", args, code, se.String())
	}
	return matrixTrace{trace: trace, chain: []string{"main", "a", "b", "c"}}
}

// matrixWine records the Windows chain fixture with rawstack.exe under
// Wine; it is symbolized on Linux from the images and PDBs by identity.
func matrixWine(t *testing.T) matrixTrace {
	w := wine.Need(t)
	exe, _ := buildWinChain(t)
	rawstack := w.GoBuild(t, ".")
	trace := filepath.Join(t.TempDir(), "trace.rawstack")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := w.Command(ctx, rawstack, "record", "-F", "250", "-o", wine.Path(trace), "--", wine.Path(exe), "2").CombinedOutput()
	if err != nil {
		t.Fatalf("wine rawstack.exe record: %v\n%s", err, out)
	}
	return matrixTrace{trace: trace, chain: []string{"main", "outer", "middle", "leaf_work"},
		sym: []string{"--debug-dir", filepath.Dir(exe)}}
}

func readFolded(t *testing.T, b []byte) []weighted {
	var out []weighted
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sp := strings.LastIndexByte(line, ' ')
		n, err := strconv.ParseInt(line[sp+1:], 10, 64)
		if sp < 0 || err != nil {
			t.Fatalf("folded line %q", line)
		}
		out = append(out, weighted{strings.Split(line[:sp], ";"), n})
	}
	return out
}

// readPprof takes the sample type in nanoseconds of CPU.
func readPprof(t *testing.T, b []byte) []weighted {
	p, err := profile.ParseData(b)
	if err != nil {
		t.Fatal(err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		t.Fatalf("pprof sample types %v: no cpu/nanoseconds", p.SampleType)
	}
	var out []weighted
	for _, s := range p.Sample {
		var names []string
		for i := len(s.Location) - 1; i >= 0; i-- {
			ls := s.Location[i].Line
			for j := len(ls) - 1; j >= 0; j-- {
				names = append(names, ls[j].Function.Name)
			}
		}
		out = append(out, weighted{names, s.Value[idx]})
	}
	return out
}

// readOTLP takes each sample's value (nanoseconds of CPU) or, where a
// sample carries timestamps and no values, the profile's period per
// timestamp.
func readOTLP(t *testing.T, b []byte) []weighted {
	var u pprofile.ProtoUnmarshaler
	p, err := u.UnmarshalProfiles(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := otlpcheck.Check(p); err != nil {
		t.Errorf("the OTLP output does not conform: %v", err)
	}
	d := p.Dictionary()
	var out []weighted
	for _, rp := range p.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, pr := range sp.Profiles().All() {
				st := pr.SampleType()
				if unit := d.StringTable().At(int(st.UnitStrindex())); unit != "nanoseconds" {
					t.Fatalf("OTLP sample type unit %q, want nanoseconds", unit)
				}
				for _, s := range pr.Samples().All() {
					var w int64
					if s.Values().Len() > 0 {
						for _, v := range s.Values().All() {
							w += v
						}
					} else {
						w = int64(s.TimestampsUnixNano().Len()) * pr.Period()
					}
					var names []string
					for _, li := range d.StackTable().At(int(s.StackIndex())).LocationIndices().All() {
						ls := d.LocationTable().At(int(li)).Lines()
						for j := ls.Len() - 1; j >= 0; j-- {
							fn := d.FunctionTable().At(int(ls.At(j).FunctionIndex()))
							names = append(names, d.StringTable().At(int(fn.NameStrindex())))
						}
					}
					// Leaf first in OTLP: root first here.
					for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
						names[i], names[j] = names[j], names[i]
					}
					out = append(out, weighted{names, w})
				}
			}
		}
	}
	return out
}

// readChrome reads the Trace Event Format's samples and stackFrames; a
// sample's weight is in nanoseconds.
func readChrome(t *testing.T, b []byte) []weighted {
	var v struct {
		Samples []struct {
			Sf     json.RawMessage `json:"sf"`
			Weight int64           `json:"weight"`
		} `json:"samples"`
		StackFrames map[string]struct {
			Name   string          `json:"name"`
			Parent json.RawMessage `json:"parent"`
		} `json:"stackFrames"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	key := func(raw json.RawMessage) string { return strings.Trim(string(raw), `"`) }
	var out []weighted
	for _, s := range v.Samples {
		var names []string
		for id, n := key(s.Sf), 0; id != "" && n < 1024; n++ {
			f, ok := v.StackFrames[id]
			if !ok {
				break
			}
			names = append([]string{chromeName(f.Name)}, names...)
			id = key(f.Parent)
		}
		out = append(out, weighted{names, s.Weight})
	}
	return out
}

// chromeName is a Chrome frame's function: its name without the module
// or location rawstack appends.
func chromeName(s string) string {
	if i := strings.IndexAny(s, " \t"); i > 0 {
		return s[:i]
	}
	return s
}

// readFirefox reads the Gecko profile format's samples of every thread;
// weights are in the profile's "tracing-ms" (milliseconds) or sample
// counts times the interval.
func readFirefox(t *testing.T, b []byte) []weighted {
	var v struct {
		Meta struct {
			Interval float64 `json:"interval"`
		} `json:"meta"`
		Threads []struct {
			Samples struct {
				Schema     map[string]int `json:"schema"`
				Data       [][]any        `json:"data"`
				WeightType string         `json:"weightType"`
			} `json:"samples"`
			StackTable struct {
				Schema map[string]int `json:"schema"`
				Data   [][]any        `json:"data"`
			} `json:"stackTable"`
			FrameTable struct {
				Schema map[string]int `json:"schema"`
				Data   [][]any        `json:"data"`
			} `json:"frameTable"`
			FuncTable struct {
				Schema map[string]int `json:"schema"`
				Data   [][]any        `json:"data"`
			} `json:"funcTable"`
			StringTable []string `json:"stringTable"`
		} `json:"threads"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	num := func(x any) int {
		f, _ := x.(float64)
		if x == nil {
			return -1
		}
		return int(f)
	}
	var out []weighted
	for _, th := range v.Threads {
		stackIdx, ok := th.Samples.Schema["stack"]
		if !ok {
			t.Fatalf("firefox samples schema %v: no stack", th.Samples.Schema)
		}
		weightIdx, hasWeight := th.Samples.Schema["weight"]
		name := func(frame int) string {
			if frame < 0 || frame >= len(th.FrameTable.Data) {
				return "?"
			}
			if fi, ok := th.FrameTable.Schema["func"]; ok {
				fn := num(th.FrameTable.Data[frame][fi])
				if ni, ok := th.FuncTable.Schema["name"]; ok && fn >= 0 && fn < len(th.FuncTable.Data) {
					if s := num(th.FuncTable.Data[fn][ni]); s >= 0 && s < len(th.StringTable) {
						return chromeName(th.StringTable[s])
					}
				}
			}
			if li, ok := th.FrameTable.Schema["location"]; ok {
				if s := num(th.FrameTable.Data[frame][li]); s >= 0 && s < len(th.StringTable) {
					return chromeName(th.StringTable[s])
				}
			}
			return "?"
		}
		for _, s := range th.Samples.Data {
			var names []string
			for st, n := num(s[stackIdx]), 0; st >= 0 && st < len(th.StackTable.Data) && n < 1024; n++ {
				row := th.StackTable.Data[st]
				names = append([]string{name(num(row[th.StackTable.Schema["frame"]]))}, names...)
				st = num(row[th.StackTable.Schema["prefix"]])
			}
			w := int64(v.Meta.Interval * 1e6)
			if hasWeight && weightIdx < len(s) && s[weightIdx] != nil {
				w = int64(s[weightIdx].(float64))
				if th.Samples.WeightType == "tracing-ms" {
					w = int64(s[weightIdx].(float64) * 1e6)
				}
			}
			out = append(out, weighted{names, w})
		}
	}
	return out
}

// readSpeedscope reads every profile of a speedscope file; weights are in
// the profile's unit, which must be nanoseconds.
func readSpeedscope(t *testing.T, b []byte) []weighted {
	var v struct {
		Shared struct {
			Frames []struct {
				Name string `json:"name"`
			} `json:"frames"`
		} `json:"shared"`
		Profiles []struct {
			Type    string  `json:"type"`
			Unit    string  `json:"unit"`
			Samples [][]int `json:"samples"`
			Weights []int64 `json:"weights"`
		} `json:"profiles"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var out []weighted
	for _, p := range v.Profiles {
		if p.Type != "sampled" {
			continue
		}
		if p.Unit != "nanoseconds" {
			t.Fatalf("speedscope profile unit %q, want nanoseconds", p.Unit)
		}
		for i, s := range p.Samples {
			var names []string
			for _, f := range s {
				names = append(names, chromeName(v.Shared.Frames[f].Name))
			}
			out = append(out, weighted{names, p.Weights[i]})
		}
	}
	return out
}

// readPerfetto decodes the trace's packets far enough to read the
// interned function names, the callstacks and the perf samples
// (protos/perfetto/trace: TracePacket.interned_data = 12, perf_sample =
// 66; InternedData.function_names = 5, frames = 6, callstacks = 7).
// Perfetto samples carry no weight: each counts 1.
func readPerfetto(t *testing.T, b []byte) []weighted {
	type frame struct{ fn uint64 }
	names := map[uint64]string{}
	frames := map[uint64]frame{}
	stacks := map[uint64][]uint64{}
	var samples []uint64
	for _, pkt := range protoFields(t, b) {
		if pkt.num != 1 {
			continue
		}
		for _, f := range protoFields(t, pkt.bytes) {
			switch f.num {
			case 12: // interned_data
				for _, e := range protoFields(t, f.bytes) {
					switch e.num {
					case 5: // function_names: InternedString{iid=1, str=2}
						var iid uint64
						var s string
						for _, g := range protoFields(t, e.bytes) {
							if g.num == 1 {
								iid = g.varint
							} else if g.num == 2 {
								s = string(g.bytes)
							}
						}
						names[iid] = s
					case 6: // frames: Frame{iid=1, function_name_id=2}
						var iid, fn uint64
						for _, g := range protoFields(t, e.bytes) {
							if g.num == 1 {
								iid = g.varint
							} else if g.num == 2 {
								fn = g.varint
							}
						}
						frames[iid] = frame{fn}
					case 7: // callstacks: Callstack{iid=1, frame_ids=2}
						var iid uint64
						var ids []uint64
						for _, g := range protoFields(t, e.bytes) {
							if g.num == 1 {
								iid = g.varint
							} else if g.num == 2 {
								if g.wire == 2 {
									for p := g.bytes; len(p) > 0; {
										v, n := binary.Uvarint(p)
										if n <= 0 {
											t.Fatal("perfetto: bad packed frame ids")
										}
										ids, p = append(ids, v), p[n:]
									}
								} else {
									ids = append(ids, g.varint)
								}
							}
						}
						stacks[iid] = ids
					}
				}
			case 66: // perf_sample: PerfSample{callstack_iid=4}
				for _, g := range protoFields(t, f.bytes) {
					if g.num == 4 {
						samples = append(samples, g.varint)
					}
				}
			}
		}
	}
	if len(samples) == 0 {
		t.Fatal("perfetto: no perf samples")
	}
	var out []weighted
	for _, cs := range samples {
		var ns []string
		for _, fid := range stacks[cs] { // root first
			ns = append(ns, chromeName(names[frames[fid].fn]))
		}
		out = append(out, weighted{ns, 1})
	}
	return out
}

type protoField struct {
	num    uint64
	wire   int
	varint uint64
	bytes  []byte
}

// protoFields splits one protobuf message into its fields.
func protoFields(t *testing.T, b []byte) []protoField {
	var out []protoField
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			t.Fatal("protobuf: bad key")
		}
		b = b[n:]
		f := protoField{num: key >> 3, wire: int(key & 7)}
		switch f.wire {
		case 0:
			f.varint, n = binary.Uvarint(b)
			if n <= 0 {
				t.Fatal("protobuf: bad varint")
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				t.Fatal("protobuf: short fixed64")
			}
			f.varint, b = binary.LittleEndian.Uint64(b), b[8:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				t.Fatal("protobuf: bad length")
			}
			f.bytes, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				t.Fatal("protobuf: short fixed32")
			}
			f.varint, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		default:
			t.Fatalf("protobuf: wire type %d", f.wire)
		}
		out = append(out, f)
	}
	return out
}
