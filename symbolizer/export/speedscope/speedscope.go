// Package speedscope exports a symbolized timeline in speedscope's JSON
// file format (https://www.speedscope.app/file-format-schema.json, shipped
// in the npm package speedscope as dist/release/file-format-schema.json).
//
// Each thread becomes a sampled profile (stacks root first, weights in
// nanoseconds: the sampling period on CPU, the blocked time off CPU, in
// time order so speedscope's "Time Order" view is the thread's timeline),
// and each thread with spans an evented profile of its spans (open and
// close events in nanoseconds from the start of the recording). Inlined
// functions are frames of their own. speedscope has no instant events:
// markers and counters are left out.
package speedscope

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/internal/frames"
)

// ErrNoTimeline says the profile was built without Options.Timeline.
var ErrNoTimeline = errors.New("speedscope: the profile has no timeline (build it with symbolizer.Options.Timeline)")

// Schema is the $schema value of a speedscope file.
const Schema = "https://www.speedscope.app/file-format-schema.json"

// File is the top level of a speedscope file.
type File struct {
	Schema             string    `json:"$schema"`
	Shared             Shared    `json:"shared"`
	Profiles           []Profile `json:"profiles"`
	Name               string    `json:"name,omitempty"`
	ActiveProfileIndex int       `json:"activeProfileIndex"`
	Exporter           string    `json:"exporter,omitempty"`
}

// Shared holds the frames every profile indexes.
type Shared struct {
	Frames []Frame `json:"frames"`
}

// Frame is a function.
type Frame struct {
	Name string `json:"name"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

// Profile is a sampled or an evented profile.
type Profile struct {
	Type       string  `json:"type"` // "sampled" or "evented"
	Name       string  `json:"name"`
	Unit       string  `json:"unit"`
	StartValue int64   `json:"startValue"`
	EndValue   int64   `json:"endValue"`
	Samples    [][]int `json:"samples,omitempty"`
	Weights    []int64 `json:"weights,omitempty"`
	Events     []Event `json:"events,omitempty"`
}

// Event opens ("O") or closes ("C") a frame at a time.
type Event struct {
	Type  string `json:"type"`
	Frame int    `json:"frame"`
	At    int64  `json:"at"`
}

// Convert builds the speedscope file of p, which must have a timeline.
func Convert(p *symbolizer.Profile, name string) (*File, error) {
	tl := p.Timeline
	if tl == nil {
		return nil, ErrNoTimeline
	}
	ft := frames.New(p)
	f := &File{Schema: Schema, Name: name, Exporter: "rawstack"}
	spanFrames := map[string]int{}
	var spanFrameList []Frame
	var buf []int
	busiest, most := -1, 0
	// Weights are ns (format/SPEC.md §6.10); a profile whose on-CPU
	// samples all weigh 1 counts samples.
	unit := "nanoseconds"
	if p.Unweighted {
		unit = "none"
	}
	for _, th := range tl.Threads {
		if len(th.Samples) > most {
			busiest, most = len(f.Profiles), len(th.Samples)
		}
		if len(th.Samples) > 0 {
			sp := Profile{Type: "sampled", Name: frames.ThreadName(th), Unit: unit}
			for _, s := range th.Samples {
				buf = frames.RootFirst(ft.Stack(buf[:0], s.Locs))
				sp.Samples = append(sp.Samples, append([]int{}, buf...))
				w := s.Weight
				if w <= 0 {
					w = 1
				}
				sp.Weights = append(sp.Weights, w)
				sp.EndValue += w
			}
			f.Profiles = append(f.Profiles, sp)
		}
		if len(th.Spans) > 0 {
			ep := Profile{Type: "evented", Name: frames.ThreadName(th) + " spans", Unit: "nanoseconds", EndValue: tl.End - tl.Start}
			ep.Events = spanEvents(th.Spans, tl.Start, func(name string) int {
				i, ok := spanFrames[name]
				if !ok {
					i = len(spanFrameList)
					spanFrames[name] = i
					spanFrameList = append(spanFrameList, Frame{Name: name})
				}
				return i
			})
			f.Profiles = append(f.Profiles, ep)
		}
	}
	for _, fr := range ft.Frames {
		f.Shared.Frames = append(f.Shared.Frames, Frame{Name: fr.Name, File: fr.File, Line: fr.Line})
	}
	// Span frames come after the code frames.
	off := len(f.Shared.Frames)
	f.Shared.Frames = append(f.Shared.Frames, spanFrameList...)
	for i := range f.Profiles {
		for j := range f.Profiles[i].Events {
			f.Profiles[i].Events[j].Frame += off
		}
	}
	if busiest >= 0 {
		f.ActiveProfileIndex = busiest // open on the thread that ran most
	}
	if f.Shared.Frames == nil {
		f.Shared.Frames = []Frame{}
	}
	if f.Profiles == nil {
		f.Profiles = []Profile{}
	}
	return f, nil
}

// spanEvents lists open/close events of well-nested spans (sorted by
// begin, enclosing first, clipped to their parents as the timeline
// guarantees) in time order, closes before opens at equal times.
func spanEvents(spans []symbolizer.Span, start int64, frame func(string) int) []Event {
	var ev []Event
	type open struct {
		end   int64
		frame int
	}
	var stack []open
	closeTo := func(t int64) {
		for len(stack) > 0 && stack[len(stack)-1].end <= t {
			o := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			ev = append(ev, Event{"C", o.frame, o.end - start})
		}
	}
	for _, s := range spans {
		closeTo(s.Begin)
		fr := frame(s.Name)
		ev = append(ev, Event{"O", fr, s.Begin - start})
		stack = append(stack, open{s.End, fr})
	}
	closeTo(1<<63 - 1)
	return ev
}

// Write writes p as a speedscope JSON file.
func Write(w io.Writer, p *symbolizer.Profile, name string) error {
	f, err := Convert(p, name)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	if err := json.NewEncoder(bw).Encode(f); err != nil {
		return err
	}
	return bw.Flush()
}
