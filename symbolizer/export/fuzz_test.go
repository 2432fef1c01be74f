package export_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/chrome"
	"github.com/rawstack/rawstack/symbolizer/export/firefox"
	"github.com/rawstack/rawstack/symbolizer/export/perfetto"
	"github.com/rawstack/rawstack/symbolizer/export/speedscope"
)

// oddSpans is a stream whose spans misbehave: an end before its begin, an
// end of a span never begun, a span that outlives its parent, a span left
// open, a marker and a counter on unknown threads, a NaN counter.
func oddSpans() []byte {
	var b bytes.Buffer
	w, _ := format.NewWriter(&b, format.Header{PointerSize: 8, OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic}, nil)
	w.WriteProcess(format.Process{Time: 1, Pid: 7, Name: "odd"})
	w.WriteString(1, "a")
	w.WriteString(2, "b")
	w.WriteStack(1, []uint64{0x1000, 0x2000})
	w.WriteSpanBegin(format.SpanBegin{Time: 100, Tid: 7, ID: 1, Name: 1})
	w.WriteSpanBegin(format.SpanBegin{Time: 150, Tid: 7, ID: 2, Parent: 1, Name: 2, Stack: 1})
	w.WriteSpanEnd(format.SpanEnd{Time: 200, Tid: 7, ID: 1})
	w.WriteSpanEnd(format.SpanEnd{Time: 300, Tid: 7, ID: 2})
	w.WriteSpanEnd(format.SpanEnd{Time: 50, Tid: 7, ID: 9})
	w.WriteSpanBegin(format.SpanBegin{Time: 400, Tid: 8, ID: 3, Name: 5})
	w.WriteSpanBegin(format.SpanBegin{Time: 500, Tid: 8, ID: 4, Name: 1})
	w.WriteSpanEnd(format.SpanEnd{Time: 450, Tid: 8, ID: 4})
	w.WriteMarker(format.Marker{Time: 10, Tid: 9, Name: 2, Stack: 3})
	w.WriteCounter(format.Counter{Time: 20, Name: 1, Value: math.NaN()})
	w.WriteCounter(format.Counter{Time: 30, Name: 1, Value: math.Inf(1)})
	w.WriteSample(format.Sample{Time: 120, Pid: 7, Tid: 7, Weight: 1, Stack: 1})
	w.Close()
	return b.Bytes()
}

// FuzzTimeline builds the timeline of arbitrary streams and writes every
// timeline format: no exporter may fail or panic, the JSON must parse and
// speedscope's spans must stay well nested whatever the events say.
func FuzzTimeline(f *testing.F) {
	if b, err := os.ReadFile("../../format/testdata/every_kind.rawstack"); err == nil {
		f.Add(b)
	}
	f.Add(oddSpans())
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := format.NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		// No module file is opened (the path map points nowhere): the
		// timeline, not symbolization, is under test.
		p, err := symbolizer.Build(r, &symbolizer.Options{Timeline: true, NoDebuginfod: true, Kallsyms: "/nonexistent",
			PathMap: []symbolizer.PathMap{{Old: "/", New: "/nonexistent/"}}})
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := perfetto.Write(&b, p); err != nil {
			t.Fatal(err)
		}
		decodePerfetto(t, b.Bytes())
		for name, write := range map[string]func(io.Writer, *symbolizer.Profile) error{
			"chrome":  chrome.Write,
			"firefox": firefox.Write,
		} {
			b.Reset()
			if err := write(&b, p); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !json.Valid(b.Bytes()) {
				t.Fatalf("%s: invalid JSON", name)
			}
			if name == "firefox" {
				checkGecko(t, b.Bytes(), "")
			}
		}
		b.Reset()
		if err := speedscope.Write(&b, p, "fuzz"); err != nil {
			t.Fatal(err)
		}
		var sf speedscope.File
		if err := json.Unmarshal(b.Bytes(), &sf); err != nil {
			t.Fatal(err)
		}
		checkSpeedscope(t, &sf)
	})
}
