// Package firefox exports a symbolized timeline in the Firefox Profiler's
// Gecko profile format (what Firefox itself writes; the profiler upgrades
// and processes it on load), following the types of the profiler's
// src/types/gecko-profile.ts at Gecko format version 36.
//
// Each thread is a GeckoThread with its own string, frame and stack tables
// (stacks are prefix trees: each entry is a frame and the index of its
// caller's entry), samples with times in milliseconds since meta.startTime,
// and markers: spans as interval markers (phase 1), markers as instants
// (phase 0). Frames are already symbolized (meta.presymbolicated), their
// location the function name; inlined functions are frames of their own.
// Counters, and the stacks captured at spans and markers, are left out:
// Gecko counters count increments, not values, and a Gecko marker's stack
// is a whole embedded thread ("SyncProfile"), not a stack index.
package firefox

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/internal/frames"
)

// Version is the Gecko profile format version written.
const Version = 36

// ErrNoTimeline says the profile was built without Options.Timeline.
var ErrNoTimeline = errors.New("firefox: the profile has no timeline (build it with symbolizer.Options.Timeline)")

// Profile is a Gecko profile (GeckoProfile).
type Profile struct {
	Meta         Meta     `json:"meta"`
	Libs         []any    `json:"libs"`
	Threads      []Thread `json:"threads"`
	PausedRanges []any    `json:"pausedRanges"`
	Processes    []any    `json:"processes"`
	Sources      Table    `json:"sources"`
}

// Meta is GeckoProfileFullMeta (the fields this exporter sets).
type Meta struct {
	Version          int        `json:"version"`
	StartTime        float64    `json:"startTime"` // ms since the Unix epoch
	ShutdownTime     *float64   `json:"shutdownTime"`
	Interval         float64    `json:"interval"` // ms
	Stackwalk        int        `json:"stackwalk"`
	Debug            int        `json:"debug"`
	Gcpoison         int        `json:"gcpoison"`
	Asyncstack       int        `json:"asyncstack"`
	ProcessType      int        `json:"processType"`
	Product          string     `json:"product"`
	Presymbolicated  bool       `json:"presymbolicated"`
	Categories       []Category `json:"categories"`
	MarkerSchema     []any      `json:"markerSchema"`
	ProfilingEndTime float64    `json:"profilingEndTime"`
}

// Category is an entry of meta.categories.
type Category struct {
	Name          string   `json:"name"`
	Color         string   `json:"color"`
	Subcategories []string `json:"subcategories"`
}

// Table is a {schema, data} table.
type Table struct {
	Schema map[string]int `json:"schema"`
	Data   [][]any        `json:"data"`
}

// Thread is a GeckoThread.
type Thread struct {
	Name           string   `json:"name"`
	RegisterTime   float64  `json:"registerTime"`
	ProcessType    string   `json:"processType"`
	ProcessName    string   `json:"processName,omitempty"`
	UnregisterTime *float64 `json:"unregisterTime"`
	Tid            uint32   `json:"tid"`
	Pid            uint32   `json:"pid"`
	Markers        Table    `json:"markers"`
	Samples        Table    `json:"samples"`
	FrameTable     Table    `json:"frameTable"`
	StackTable     Table    `json:"stackTable"`
	StringTable    []string `json:"stringTable"`
}

// Category indices of meta.categories.
const (
	catOther = 0
	catUser  = 1
)

// Convert builds the Gecko profile of p, which must have a timeline.
func Convert(p *symbolizer.Profile) (*Profile, error) {
	tl := p.Timeline
	if tl == nil {
		return nil, ErrNoTimeline
	}
	ms := func(t int64) float64 { return float64(t-tl.Start) / 1e6 }
	out := &Profile{
		Meta: Meta{
			Version: Version, StartTime: float64(tl.WallStart) / 1e6, Stackwalk: 1, ProcessType: 0,
			Product: "rawstack", Presymbolicated: true, MarkerSchema: []any{},
			Categories: []Category{
				{Name: "Other", Color: "grey", Subcategories: []string{"Other"}},
				{Name: "User", Color: "yellow", Subcategories: []string{"Other"}},
			},
			ProfilingEndTime: ms(tl.End),
		},
		Libs: []any{}, PausedRanges: []any{}, Processes: []any{},
		Sources: Table{Schema: map[string]int{"uuid": 0, "filename": 1, "startLine": 2, "startColumn": 3, "sourceMapURL": 4}, Data: [][]any{}},
	}
	var n, total int64
	procName := map[uint32]string{}
	for _, pr := range tl.Processes {
		procName[pr.Pid] = pr.Name
	}
	ft := frames.New(p)
	var buf []int
	for _, th := range tl.Threads {
		gt := Thread{
			Name: frames.ThreadName(th), ProcessType: "default", ProcessName: procName[th.Pid],
			Tid: th.Tid, Pid: th.Pid,
			Markers:     Table{Schema: map[string]int{"name": 0, "startTime": 1, "endTime": 2, "phase": 3, "category": 4, "data": 5}, Data: [][]any{}},
			Samples:     Table{Schema: map[string]int{"stack": 0, "time": 1, "eventDelay": 2}, Data: [][]any{}},
			FrameTable:  Table{Schema: map[string]int{"location": 0, "relevantForJS": 1, "innerWindowID": 2, "implementation": 3, "line": 4, "column": 5, "category": 6, "subcategory": 7}, Data: [][]any{}},
			StackTable:  Table{Schema: map[string]int{"prefix": 0, "frame": 1}, Data: [][]any{}},
			StringTable: []string{},
		}
		strs := map[string]int{}
		str := func(s string) int {
			i, ok := strs[s]
			if !ok {
				i = len(gt.StringTable)
				strs[s] = i
				gt.StringTable = append(gt.StringTable, s)
			}
			return i
		}
		frameIdx := map[int]int{} // frames.Table index → frameTable index
		frame := func(fi int) int {
			i, ok := frameIdx[fi]
			if !ok {
				fr := ft.Frames[fi]
				var line any
				if fr.Line > 0 {
					line = fr.Line
				}
				i = len(gt.FrameTable.Data)
				frameIdx[fi] = i
				gt.FrameTable.Data = append(gt.FrameTable.Data, []any{str(fr.Name), false, nil, nil, line, nil, catOther, 0})
			}
			return i
		}
		type stackKey struct{ prefix, frame int }
		stacks := map[stackKey]int{}
		stack := func(leafFirst []int) any {
			prefix := -1
			for i := len(leafFirst) - 1; i >= 0; i-- {
				f := frame(leafFirst[i])
				k := stackKey{prefix, f}
				s, ok := stacks[k]
				if !ok {
					s = len(gt.StackTable.Data)
					stacks[k] = s
					var pv any
					if prefix >= 0 {
						pv = prefix
					}
					gt.StackTable.Data = append(gt.StackTable.Data, []any{pv, f})
				}
				prefix = s
			}
			if prefix < 0 {
				return nil
			}
			return prefix
		}
		if len(th.Samples) > 0 {
			gt.RegisterTime = ms(th.Samples[0].Time)
		}
		for _, s := range th.Samples {
			gt.Samples.Data = append(gt.Samples.Data, []any{stack(ft.Stack(buf[:0], s.Locs)), ms(s.Time), 0})
			if !s.OffCPU {
				n++
				total += s.Weight
			}
		}
		for _, s := range th.Spans {
			gt.Markers.Data = append(gt.Markers.Data, []any{str(s.Name), ms(s.Begin), ms(s.End), 1, catUser, nil})
		}
		for _, m := range th.Markers {
			gt.Markers.Data = append(gt.Markers.Data, []any{str(m.Name), ms(m.Time), nil, 0, catUser, nil})
		}
		out.Threads = append(out.Threads, gt)
	}
	// The interval is the mean on-CPU weight (ns, format/SPEC.md §6.10),
	// so the profiler's sample counts read as time; a profile whose
	// on-CPU samples all weigh 1 has no time to give: 1 ms.
	out.Meta.Interval = 1
	if n > 0 && total > 0 && !p.Unweighted {
		out.Meta.Interval = float64(total) / float64(n) / 1e6
	}
	if out.Threads == nil {
		out.Threads = []Thread{}
	}
	return out, nil
}

// Write writes p as a Gecko profile (JSON).
func Write(w io.Writer, p *symbolizer.Profile) error {
	g, err := Convert(p)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	if err := json.NewEncoder(bw).Encode(g); err != nil {
		return err
	}
	return bw.Flush()
}
