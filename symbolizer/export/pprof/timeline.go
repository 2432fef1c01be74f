package pprof

import (
	"encoding/binary"
	"strconv"

	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/symbolizer"
)

// Tag keys of ConvertTimeline's samples.
const (
	// ThreadTag is a string label: the thread's name and tid, "name (tid)".
	ThreadTag = "thread"
	// TimeTag is a numeric label in nanoseconds: when the samples' time
	// bucket starts, counted from the start of the recording.
	TimeTag = "time"
)

// ConvertTimeline builds the pprof profile of p, which must have been
// built with its timeline, with samples split by thread and by time
// bucket (bucket ns; ≤ 0 means 100 ms) and tagged with ThreadTag and
// TimeTag, so pprof's tag filters select threads and time ranges
// (pprof -tagfocus=thread=worker, -tagfocus=time=1s:2s). Without a
// timeline it is Convert.
func ConvertTimeline(p *symbolizer.Profile, bucket int64) *profile.Profile {
	out := Convert(p)
	tl := p.Timeline
	if tl == nil {
		return out
	}
	if bucket <= 0 {
		bucket = 100e6
	}
	out.Sample = out.Sample[:0]
	byKey := map[string]*profile.Sample{}
	var key []byte
	for ti, th := range tl.Threads {
		name := th.Name
		if name == "" {
			name = "thread"
		}
		label := name + " (" + strconv.FormatUint(uint64(th.Tid), 10) + ")"
		for _, s := range th.Samples {
			b := (s.Time - tl.Start) / bucket * bucket
			key = binary.AppendUvarint(key[:0], uint64(ti))
			key = binary.AppendUvarint(key, uint64(b))
			for _, l := range s.Locs {
				key = binary.AppendUvarint(key, uint64(l))
			}
			ps := byKey[string(key)]
			if ps == nil {
				ps = &profile.Sample{
					Value:    []int64{0, 0},
					Label:    map[string][]string{ThreadTag: {label}},
					NumLabel: map[string][]int64{TimeTag: {b}},
					NumUnit:  map[string][]string{TimeTag: {"nanoseconds"}},
				}
				for _, li := range s.Locs {
					ps.Location = append(ps.Location, out.Location[li])
				}
				byKey[string(key)] = ps
				out.Sample = append(out.Sample, ps)
			}
			ps.Value[0]++
			if !s.OffCPU {
				ps.Value[1] += s.Weight
			}
		}
	}
	return out
}
