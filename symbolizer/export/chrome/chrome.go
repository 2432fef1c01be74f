// Package chrome exports a symbolized timeline as Chrome's JSON trace event
// format (the "Trace Event Format" document of the Chromium project), read
// by Perfetto's legacy JSON importer, chrome://tracing and speedscope.
//
// Processes and threads get "M" (metadata) name events; spans become "X"
// (complete) events on their thread (a Go span on its goroutine's track,
// a thread named "goroutine ID FUNCTION" whose tid has the high bit set,
// symbolizer.GoroutineTid; a linked span with trace_id and span_id args), markers "i" (instant, thread scope)
// events, counters "C" events on the first process. Samples are listed in
// the top-level "samples" array, each naming a node of "stackFrames" (a
// tree of frames, each node with its parent), inlined functions as nodes
// of their own. Times are microseconds on the recording's monotonic clock.
package chrome

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/internal/frames"
)

// ErrNoTimeline says the profile was built without Options.Timeline.
var ErrNoTimeline = errors.New("chrome: the profile has no timeline (build it with symbolizer.Options.Timeline)")

// Trace is the JSON object format of a trace.
type Trace struct {
	TraceEvents     []Event               `json:"traceEvents"`
	StackFrames     map[string]StackFrame `json:"stackFrames"`
	Samples         []Sample              `json:"samples"`
	DisplayTimeUnit string                `json:"displayTimeUnit"`
	OtherData       map[string]string     `json:"otherData,omitempty"`
}

// Event is one trace event.
type Event struct {
	Name  string         `json:"name"`
	Cat   string         `json:"cat,omitempty"`
	Ph    string         `json:"ph"`
	Ts    Micros         `json:"ts"`
	Dur   *Micros        `json:"dur,omitempty"`
	Pid   uint32         `json:"pid"`
	Tid   uint32         `json:"tid"`
	S     string         `json:"s,omitempty"`
	Sf    string         `json:"sf,omitempty"`
	Args  map[string]any `json:"args,omitempty"`
	Scope string         `json:"scope,omitempty"`
}

// StackFrame is a node of the stack frame tree.
type StackFrame struct {
	Name     string `json:"name"`
	Category string `json:"category"`
	Parent   string `json:"parent,omitempty"`
}

// Sample is one sample: the thread, the time and the leaf node.
type Sample struct {
	Cpu    int    `json:"cpu,omitempty"`
	Pid    uint32 `json:"pid"`
	Tid    uint32 `json:"tid"`
	Ts     Micros `json:"ts"`
	Name   string `json:"name"`
	Sf     string `json:"sf"`
	Weight int64  `json:"weight"`
}

// Micros is a time in µs, written from ns with three decimals.
type Micros int64

// MarshalJSON writes the ns value as µs with ns precision.
func (m Micros) MarshalJSON() ([]byte, error) {
	v := int64(m)
	neg := v < 0
	if neg {
		v = -v
	}
	b := make([]byte, 0, 24)
	if neg {
		b = append(b, '-')
	}
	b = strconv.AppendInt(b, v/1000, 10)
	if r := v % 1000; r != 0 {
		b = append(b, '.', byte('0'+r/100), byte('0'+r/10%10), byte('0'+r%10))
	}
	return b, nil
}

// Convert builds the trace of p, which must have a timeline.
func Convert(p *symbolizer.Profile) (*Trace, error) {
	tl := p.Timeline
	if tl == nil {
		return nil, ErrNoTimeline
	}
	tr := &Trace{StackFrames: map[string]StackFrame{}, Samples: []Sample{}, DisplayTimeUnit: "ns",
		OtherData: map[string]string{"exporter": "rawstack"}}
	for _, pr := range tl.Processes {
		name := pr.Name
		if name == "" {
			name = "process " + strconv.FormatUint(uint64(pr.Pid), 10)
		}
		tr.TraceEvents = append(tr.TraceEvents, Event{Name: "process_name", Ph: "M", Pid: pr.Pid, Args: map[string]any{"name": name}})
	}
	ft := frames.New(p)
	type nodeKey struct{ parent, frame int }
	nodes := map[nodeKey]int{}
	node := func(leafFirst []int) string {
		parent := -1
		for i := len(leafFirst) - 1; i >= 0; i-- {
			k := nodeKey{parent, leafFirst[i]}
			id, ok := nodes[k]
			if !ok {
				id = len(nodes) + 1
				nodes[k] = id
				fr := ft.Frames[leafFirst[i]]
				sf := StackFrame{Name: fr.Name, Category: baseName(fr.Module)}
				if sf.Category == "" {
					sf.Category = "unknown"
				}
				if parent >= 0 {
					sf.Parent = strconv.Itoa(parent)
				}
				tr.StackFrames[strconv.Itoa(id)] = sf
			}
			parent = id
		}
		if parent < 0 {
			return ""
		}
		return strconv.Itoa(parent)
	}
	var buf []int
	// The busiest thread first: speedscope opens on the first thread of
	// the samples.
	for _, th := range frames.Busiest(tl) {
		tr.TraceEvents = append(tr.TraceEvents, Event{Name: "thread_name", Ph: "M", Pid: th.Pid, Tid: th.Tid, Args: map[string]any{"name": frames.ThreadName(th)}})
		for _, s := range th.Samples {
			name := "cpu"
			if s.OffCPU {
				name = "off-cpu"
			}
			w := s.Weight
			if w <= 0 {
				w = 1
			}
			tr.Samples = append(tr.Samples, Sample{Pid: th.Pid, Tid: th.Tid, Ts: Micros(s.Time), Name: name,
				Sf: node(ft.Stack(buf[:0], s.Locs)), Weight: w})
		}
		for _, s := range th.Spans {
			d := Micros(s.End - s.Begin)
			e := Event{Name: s.Name, Cat: "span", Ph: "X", Ts: Micros(s.Begin), Dur: &d, Pid: th.Pid, Tid: th.Tid}
			if s.Locs != nil {
				e.Sf = node(ft.Stack(buf[:0], s.Locs))
			}
			if s.Open || s.Clipped {
				e.Args = map[string]any{"open": s.Open, "clipped": s.Clipped}
			}
			if !s.Link.IsZero() {
				if e.Args == nil {
					e.Args = map[string]any{}
				}
				e.Args["trace_id"], e.Args["span_id"] = hex.EncodeToString(s.Link.TraceID[:]), hex.EncodeToString(s.Link.SpanID[:])
			}
			tr.TraceEvents = append(tr.TraceEvents, e)
		}
		for _, m := range th.Markers {
			e := Event{Name: m.Name, Cat: "marker", Ph: "i", S: "t", Ts: Micros(m.Time), Pid: th.Pid, Tid: th.Tid}
			if m.Locs != nil {
				e.Sf = node(ft.Stack(buf[:0], m.Locs))
			}
			tr.TraceEvents = append(tr.TraceEvents, e)
		}
	}
	var pid uint32
	if len(tl.Processes) > 0 {
		pid = tl.Processes[0].Pid
	}
	for _, c := range tl.Counters {
		for _, pt := range c.Points {
			if math.IsNaN(pt.Value) || math.IsInf(pt.Value, 0) {
				continue // JSON has no NaN or infinity
			}
			tr.TraceEvents = append(tr.TraceEvents, Event{Name: c.Name, Cat: "counter", Ph: "C", Ts: Micros(pt.Time), Pid: pid, Args: map[string]any{"value": pt.Value}})
		}
	}
	if tr.TraceEvents == nil {
		tr.TraceEvents = []Event{}
	}
	return tr, nil
}

// Write writes p as a JSON trace.
func Write(w io.Writer, p *symbolizer.Profile) error {
	tr, err := Convert(p)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	if err := json.NewEncoder(bw).Encode(tr); err != nil {
		return err
	}
	return bw.Flush()
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' || p[i] == '\\' {
			return p[i+1:]
		}
	}
	return p
}
