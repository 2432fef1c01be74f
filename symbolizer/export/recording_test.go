package export_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	_ "github.com/rawstack/rawstack/symbolizer/elfsrc"
	"github.com/rawstack/rawstack/symbolizer/export/chrome"
	"github.com/rawstack/rawstack/symbolizer/export/firefox"
	"github.com/rawstack/rawstack/symbolizer/export/perfetto"
	"github.com/rawstack/rawstack/symbolizer/export/speedscope"
	"github.com/rawstack/rawstack/tracer"
)

//go:noinline
func spinTimeline(d time.Duration) uint64 {
	h := uint64(1)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := 0; i < 10000; i++ {
			h = h*6364136223846793005 + 1442695040888963407
		}
	}
	return h
}

// TestRealRecording records this test process with spans, markers and a
// counter on two goroutines, builds the timeline and runs every exporter's
// output through the same checks as the golden tests.
func TestRealRecording(t *testing.T) {
	var raw bytes.Buffer
	tr, err := tracer.Start(context.Background(), tracer.Options{Frequency: 999, Streams: []io.Writer{&raw}})
	testbuild.Feature(t, err) // skips or fails on a start error
	const rounds = 20
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				sp := tr.Span(context.Background(), "round")
				in := tr.Span(sp.Context(context.Background()), "spin")
				spinTimeline(10 * time.Millisecond)
				in.End()
				tr.Marker("tick")
				tr.Counter("rounds", float64(i))
				sp.End()
			}
		}()
	}
	wg.Wait()
	if err := tr.Stop(); err != nil {
		t.Fatal(err)
	}
	r, err := format.NewReader(&raw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := symbolizer.Build(r, &symbolizer.Options{Timeline: true, NoDebuginfod: true})
	if err != nil {
		t.Fatal(err)
	}
	tl := p.Timeline
	var samples, spans, markers int64
	for _, th := range tl.Threads {
		samples += int64(len(th.Samples))
		spans += int64(len(th.Spans))
		markers += int64(len(th.Markers))
	}
	if samples != p.TotalCount() || samples < 50 {
		t.Errorf("timeline has %d samples, profile %d", samples, p.TotalCount())
	}
	if spans != 2*2*rounds || markers != 2*rounds || len(tl.Counters) != 1 || len(tl.Counters[0].Points) != 2*rounds {
		t.Errorf("%d spans, %d markers, counters %v", spans, markers, tl.Counters)
	}

	var b bytes.Buffer
	if err := speedscope.Write(&b, p, "test"); err != nil {
		t.Fatal(err)
	}
	var sf speedscope.File
	if err := json.Unmarshal(b.Bytes(), &sf); err != nil {
		t.Fatal(err)
	}
	checkSpeedscope(t, &sf)
	if !bytes.Contains(b.Bytes(), []byte("spinTimeline")) {
		t.Error("speedscope: no spinTimeline frame")
	}

	b.Reset()
	if err := firefox.Write(&b, p); err != nil {
		t.Fatal(err)
	}
	checkGecko(t, b.Bytes(), "")
	if !bytes.Contains(b.Bytes(), []byte("spinTimeline")) {
		t.Error("firefox: no spinTimeline frame")
	}

	b.Reset()
	if err := chrome.Write(&b, p); err != nil {
		t.Fatal(err)
	}
	var ct struct {
		TraceEvents []map[string]any          `json:"traceEvents"`
		StackFrames map[string]map[string]any `json:"stackFrames"`
		Samples     []map[string]any          `json:"samples"`
	}
	if err := json.Unmarshal(b.Bytes(), &ct); err != nil {
		t.Fatal(err)
	}
	if int64(len(ct.Samples)) != samples {
		t.Errorf("chrome: %d samples, want %d", len(ct.Samples), samples)
	}
	for _, s := range ct.Samples {
		if _, ok := ct.StackFrames[s["sf"].(string)]; !ok && s["sf"] != "" {
			t.Fatalf("chrome: sample names node %v, not in stackFrames", s["sf"])
		}
	}

	b.Reset()
	if err := perfetto.Write(&b, p); err != nil {
		t.Fatal(err)
	}
	pt := decodePerfetto(t, b.Bytes())
	if int64(len(pt.samples)) != samples || pt.slices["round"] != 2*rounds || pt.slices["spin"] != 2*rounds || pt.instants["tick"] != 2*rounds {
		t.Errorf("perfetto: %d samples, slices %v, instants %v", len(pt.samples), pt.slices, pt.instants)
	}
	found := false
	for _, s := range pt.samples {
		if strings.Contains(pt.stackOf(s.callstack), "spinTimeline") {
			found = true
			break
		}
	}
	if !found {
		t.Error("perfetto: no sample in spinTimeline")
	}
}
