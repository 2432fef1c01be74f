package pprof

import (
	"compress/gzip"
	"encoding/binary"
	"io"
	"strconv"

	"github.com/rawstack/rawstack/symbolizer"
)

// Label keys of WriteTimeline's samples.
const (
	// ThreadTag is a string label: the thread's name and tid, "name (tid)".
	ThreadTag = "thread"
	// TimeTag is a numeric label in nanoseconds: when the samples' time
	// bucket starts, counted from the start of the recording.
	TimeTag = "time"
)

// Label.num_unit of profile.proto (the other Label fields are in pprof.go).
const fLabelNumUnit = 4

// WriteTimeline writes p, which must have been built with its timeline
// (symbolizer.Options.Timeline), as a gzipped pprof profile whose samples
// are split by thread and by time bucket (bucket ns; ≤ 0 means 100 ms)
// and labelled with ThreadTag and TimeTag, so that pprof's tag filters
// select threads and time ranges (-tagfocus=thread=worker,
// -tagfocus=time=1s:2s). Without a timeline it writes what Write writes.
func WriteTimeline(w io.Writer, p *symbolizer.Profile, bucket int64) error {
	if bucket <= 0 {
		bucket = 100e6
	}
	zw := gzip.NewWriter(w)
	if _, err := zw.Write(encode(nil, p, bucket)); err != nil {
		return err
	}
	return zw.Close()
}

// timelineSamples encodes the timeline's samples, aggregated by thread,
// time bucket and stack.
func timelineSamples(e *encoder, tl *symbolizer.Timeline, bucket int64, cols []int) {
	type agg struct {
		thread int
		bucket int64
		locs   []int
		count  int64
		cpu    int64
		off    int64
	}
	var order []*agg
	byKey := map[string]*agg{}
	var key []byte
	for ti, th := range tl.Threads {
		for _, s := range th.Samples {
			b := (s.Time - tl.Start) / bucket * bucket
			key = binary.AppendUvarint(key[:0], uint64(ti))
			key = binary.AppendUvarint(key, uint64(b))
			for _, l := range s.Locs {
				key = binary.AppendUvarint(key, uint64(l))
			}
			a := byKey[string(key)]
			if a == nil {
				a = &agg{thread: ti, bucket: b, locs: s.Locs}
				byKey[string(key)] = a
				order = append(order, a)
			}
			a.count++
			if s.OffCPU {
				a.off += s.Weight
			} else {
				a.cpu += s.Weight
			}
		}
	}
	threadKey, timeKey, ns := uint64(e.str(ThreadTag)), uint64(e.str(TimeTag)), uint64(e.str("nanoseconds"))
	labels := make([]uint64, len(tl.Threads))
	for i, th := range tl.Threads {
		name := th.Name
		if name == "" {
			name = "thread"
		}
		labels[i] = uint64(e.str(name + " (" + strconv.FormatUint(uint64(th.Tid), 10) + ")"))
	}
	var m, l enc
	for _, a := range order {
		m.b = m.b[:0]
		m.packed(fSampleLocation, len(a.locs), func(i int) uint64 { return uint64(a.locs[i]) + 1 })
		m.packed(fSampleValue, len(cols), func(i int) uint64 { return uint64([3]int64{a.count, a.cpu, a.off}[cols[i]]) })
		l.b = l.b[:0]
		l.uint(fLabelKey, threadKey)
		l.uint(fLabelStr, labels[a.thread])
		m.msg(&m, fSampleLabel, l.b)
		l.b = l.b[:0]
		l.uint(fLabelKey, timeKey)
		l.uint(fLabelNum, uint64(a.bucket))
		l.uint(fLabelNumUnit, ns)
		m.msg(&m, fSampleLabel, l.b)
		e.b.msg(&e.b, fProfileSample, m.b)
	}
}
