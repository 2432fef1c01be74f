package export_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/otlpcheck"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/chrome"
	"github.com/rawstack/rawstack/symbolizer/export/firefox"
	"github.com/rawstack/rawstack/symbolizer/export/folded"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
	"github.com/rawstack/rawstack/symbolizer/export/pprof"
	"github.com/rawstack/rawstack/symbolizer/export/speedscope"
	"github.com/rawstack/rawstack/symbolizer/export/text"
)

// weightedTrace writes a stream whose samples weigh what weights say (ns;
// off-CPU where off is set), on two threads and two stacks.
func weightedTrace(t *testing.T, weights []uint64, off []bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{Version: format.Version1, PointerSize: 8, OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteClockSync(format.ClockSync{Time: 1, WallNano: 1700000000000000000})
	w.WriteProcess(format.Process{Time: 1, Pid: 10, Name: "app"})
	w.WriteThreadStart(format.ThreadStart{Time: 1, Pid: 10, Tid: 10})
	w.WriteThreadStart(format.ThreadStart{Time: 1, Pid: 10, Tid: 11})
	w.WriteStack(1, []uint64{0x1000, 0x2000})
	w.WriteStack(2, []uint64{0x3000, 0x2000})
	for i, wt := range weights {
		s := format.Sample{Time: int64(1e6 * (i + 2)), Pid: 10, Tid: 10 + uint32(i%2), CPU: format.NoCPU, Weight: wt, Stack: 1 + uint64(i%3%2)}
		if off != nil && off[i] {
			s.Flags |= format.SampleOffCPU
		}
		if err := w.WriteSample(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// totals are what an output says the samples add up to.
type totals struct {
	cpu, off int64 // ns; cpu is a count in an unweighted trace
	samples  int64
}

// TestUnitsAcrossOutputs: a trace with known weights gives the same
// totals, in nanoseconds, in every output that carries weights, each read
// back with the format's own decoder (format/SPEC.md §6.10): pprof's
// cpu and off_cpu values, OTLP's, folded's --value cpu and offcpu, the
// text report's header, Chrome's sample weights, speedscope's weights,
// the Firefox Profiler's interval × samples. (Perfetto's PerfSample
// packets carry no weight: it shows counts at their times.) A trace whose
// on-CPU samples all weigh 1 reads as counts: no CPU time anywhere.
func TestUnitsAcrossOutputs(t *testing.T) {
	const ms = uint64(time.Millisecond)
	cases := []struct {
		name    string
		weights []uint64
		off     []bool
		want    totals
	}{
		// perf's cpu-clock periods vary around 1/F.
		{"on-CPU", []uint64{10_101_010, 10_100_000, 10_102_500, 9_990_000, 10_101_010}, nil,
			totals{cpu: 50_394_520, samples: 5}},
		{"on- and off-CPU", []uint64{2 * ms, 2 * ms, 150 * ms, 2 * ms, 40 * ms, 2 * ms}, []bool{false, false, true, false, true, false},
			totals{cpu: int64(8 * ms), off: int64(190 * ms), samples: 6}},
		// A Windows recording from before weights were ns.
		{"unweighted", []uint64{1, 1, 1, 1}, nil, totals{cpu: 4, samples: 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := weightedTrace(t, tc.weights, tc.off)
			r, err := format.NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			p, err := symbolizer.Build(r, &symbolizer.Options{Timeline: true, NoDebuginfod: true})
			if err != nil {
				t.Fatal(err)
			}
			unweighted := tc.name == "unweighted"
			if p.Unweighted != unweighted {
				t.Fatalf("Profile.Unweighted = %v", p.Unweighted)
			}
			check := func(output string, got totals, fields ...string) {
				t.Helper()
				for _, f := range fields {
					g, w := map[string][2]int64{"cpu": {got.cpu, tc.want.cpu}, "off": {got.off, tc.want.off}, "samples": {got.samples, tc.want.samples}}[f][0],
						map[string][2]int64{"cpu": {got.cpu, tc.want.cpu}, "off": {got.off, tc.want.off}, "samples": {got.samples, tc.want.samples}}[f][1]
					if g != w {
						t.Errorf("%s: %s total %d, want %d", output, f, g, w)
					}
				}
			}

			// pprof: the sample types by name.
			var b bytes.Buffer
			if err := pprof.Write(&b, p); err != nil {
				t.Fatal(err)
			}
			pp, err := profile.Parse(&b)
			if err != nil {
				t.Fatal(err)
			}
			var pt totals
			var types []string
			for i, st := range pp.SampleType {
				types = append(types, st.Type+"/"+st.Unit)
				for _, s := range pp.Sample {
					switch st.Type + "/" + st.Unit {
					case "cpu/nanoseconds":
						pt.cpu += s.Value[i]
					case "off_cpu/nanoseconds":
						pt.off += s.Value[i]
					case "samples/count":
						pt.samples += s.Value[i]
					}
				}
			}
			if unweighted {
				if strings.Join(types, " ") != "samples/count" {
					t.Errorf("pprof sample types %v, want samples/count only", types)
				}
				pt.cpu = pt.samples
			} else if pp.PeriodType == nil || pp.PeriodType.Type != "cpu" || pp.PeriodType.Unit != "nanoseconds" {
				t.Errorf("pprof period type %+v, want cpu/nanoseconds", pp.PeriodType)
			}
			check("pprof", pt, "cpu", "off", "samples")

			// OTLP: values per timestamp, by profile sample type.
			r, _ = format.NewReader(bytes.NewReader(data))
			op, _, err := otlp.Convert(r, otlp.Options{Raw: true, RawKernel: true, NoFileHash: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			b.Reset()
			if err := otlp.Write(&b, op); err != nil {
				t.Fatal(err)
			}
			var u pprofile.ProtoUnmarshaler
			if op, err = u.UnmarshalProfiles(b.Bytes()); err != nil {
				t.Fatal(err)
			}
			if err := otlpcheck.Check(op); err != nil {
				t.Errorf("OTLP does not conform: %v", err)
			}
			var ot totals
			d := op.Dictionary()
			for _, rp := range op.ResourceProfiles().All() {
				for _, sp := range rp.ScopeProfiles().All() {
					for _, pr := range sp.Profiles().All() {
						typ := d.StringTable().At(int(pr.SampleType().TypeStrindex())) + "/" + d.StringTable().At(int(pr.SampleType().UnitStrindex()))
						for _, s := range pr.Samples().All() {
							ot.samples += int64(s.TimestampsUnixNano().Len())
							var sum int64
							for _, v := range s.Values().All() {
								sum += v
							}
							switch typ {
							case "cpu/nanoseconds":
								ot.cpu += sum
							case "off_cpu/nanoseconds":
								ot.off += sum
							case "samples/count":
								ot.cpu += int64(s.TimestampsUnixNano().Len())
								if !unweighted {
									t.Errorf("otlp: a samples/count profile of a weighted trace")
								}
							default:
								t.Errorf("otlp: sample type %s", typ)
							}
						}
					}
				}
			}
			check("otlp", ot, "cpu", "off", "samples")

			// folded: the numbers after the stacks.
			sum := func(v folded.Value) (int64, error) {
				var b bytes.Buffer
				if err := folded.Write(&b, p, v); err != nil {
					return 0, err
				}
				var n int64
				for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
					var x int64
					if i := strings.LastIndexByte(l, ' '); i >= 0 {
						if _, err := fmtSscan(l[i+1:], &x); err != nil {
							t.Fatalf("folded line %q: %v", l, err)
						}
					}
					n += x
				}
				return n, nil
			}
			var ft totals
			ft.samples, _ = sum(folded.Samples)
			ft.off, _ = sum(folded.OffCPUNanos)
			ft.cpu, err = sum(folded.CPUNanos)
			if unweighted {
				if !errors.Is(err, folded.ErrNoCPUTime) {
					t.Errorf("folded --value cpu of an unweighted trace: %v, want ErrNoCPUTime", err)
				}
				ft.cpu = ft.samples
			}
			check("folded", ft, "cpu", "off", "samples")

			// text: "N samples over D, C on CPU, O off CPU, ...".
			b.Reset()
			if err := text.Write(&b, p, 5); err != nil {
				t.Fatal(err)
			}
			head := strings.SplitN(b.String(), "\n", 2)[0]
			var tt totals
			if m := regexp.MustCompile(`^(\d+) samples`).FindStringSubmatch(head); m != nil {
				fmtSscan(m[1], &tt.samples)
			}
			for _, f := range []struct {
				re string
				v  *int64
			}{{`, ([0-9.µnms]+) on CPU`, &tt.cpu}, {`, ([0-9.µnms]+) off CPU`, &tt.off}} {
				if m := regexp.MustCompile(f.re).FindStringSubmatch(head); m != nil {
					dur, err := time.ParseDuration(m[1])
					if err != nil {
						t.Fatalf("text: %q: %v", head, err)
					}
					*f.v = int64(dur)
				}
			}
			if unweighted {
				if strings.Contains(head, "on CPU") {
					t.Errorf("text shows CPU time for an unweighted trace: %q", head)
				}
				tt.cpu = tt.samples
			}
			check("text", tt, "cpu", "off", "samples")

			// Chrome JSON: sample weights, by name.
			b.Reset()
			if err := chrome.Write(&b, p); err != nil {
				t.Fatal(err)
			}
			var ct struct {
				Samples []struct {
					Name   string `json:"name"`
					Weight int64  `json:"weight"`
				} `json:"samples"`
			}
			if err := json.Unmarshal(b.Bytes(), &ct); err != nil {
				t.Fatal(err)
			}
			var cht totals
			for _, s := range ct.Samples {
				cht.samples++
				if s.Name == "off-cpu" {
					cht.off += s.Weight
				} else {
					cht.cpu += s.Weight
				}
			}
			check("chrome", cht, "cpu", "off", "samples")

			// speedscope: a sampled profile per thread, weights in its unit.
			b.Reset()
			if err := speedscope.Write(&b, p, "t"); err != nil {
				t.Fatal(err)
			}
			var sf struct {
				Profiles []struct {
					Type    string  `json:"type"`
					Unit    string  `json:"unit"`
					Weights []int64 `json:"weights"`
				} `json:"profiles"`
			}
			if err := json.Unmarshal(b.Bytes(), &sf); err != nil {
				t.Fatal(err)
			}
			var sst int64
			for _, sp := range sf.Profiles {
				if sp.Type != "sampled" {
					continue
				}
				if want := map[bool]string{false: "nanoseconds", true: "none"}[unweighted]; sp.Unit != want {
					t.Errorf("speedscope unit %q, want %q", sp.Unit, want)
				}
				for _, w := range sp.Weights {
					sst += w
				}
			}
			if sst != tc.want.cpu+tc.want.off {
				t.Errorf("speedscope: weights add up to %d, want %d", sst, tc.want.cpu+tc.want.off)
			}

			// Firefox: the interval (ms) times the samples, for on-CPU
			// profiles; the Gecko format has no weights of its own.
			if tc.off == nil && !unweighted {
				b.Reset()
				if err := firefox.Write(&b, p); err != nil {
					t.Fatal(err)
				}
				var g struct {
					Meta struct {
						Interval float64 `json:"interval"`
					} `json:"meta"`
					Threads []struct {
						Samples struct {
							Data [][]any `json:"data"`
						} `json:"samples"`
					} `json:"threads"`
				}
				if err := json.Unmarshal(b.Bytes(), &g); err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, th := range g.Threads {
					n += len(th.Samples.Data)
				}
				if got := g.Meta.Interval * 1e6 * float64(n); got < float64(tc.want.cpu)-1 || got > float64(tc.want.cpu)+1 {
					t.Errorf("firefox: interval %v ms × %d samples = %.0f ns, want %d", g.Meta.Interval, n, got, tc.want.cpu)
				}
			}
		})
	}
}

func fmtSscan(s string, v *int64) (int, error) { return fmt.Sscan(s, v) }
