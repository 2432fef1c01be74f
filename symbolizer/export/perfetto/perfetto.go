// Package perfetto exports a symbolized timeline as a Perfetto trace: a
// protobuf Trace of TracePackets, loaded by ui.perfetto.dev and
// trace_processor.
//
// All packets are on one sequence. The first clears the sequence's
// incremental state and interns the stacks: function names, source paths,
// build ids, mapping paths, mappings (one per module), frames (one per
// function at an address, inlined functions as frames of their own, with
// module-relative pc, file and line) and callstacks (outermost frame
// first). Each sample is a PerfSample packet (pid, tid, callstack iid) at
// its time. Each process and thread gets a TrackDescriptor; spans are
// TrackEvent slices (begin/end) on their thread's track, markers instant
// events there, counters TrackEvent counter values on a counter track of
// the first process. A Go span is on its goroutine's track (a named track
// "goroutine ID FUNCTION" under its process; symbolizer.Timeline), with
// the OpenTelemetry trace and span ids it is linked to as debug
// annotations trace_id and span_id. Times are the recording's monotonic clock in ns,
// written without a clock id (Perfetto's default trace clock).
//
// Field numbers are in fields.go, taken from the published protos.
package perfetto

import (
	"bufio"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"strings"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/internal/frames"
)

// ErrNoTimeline says the profile was built without Options.Timeline.
var ErrNoTimeline = errors.New("perfetto: the profile has no timeline (build it with symbolizer.Options.Timeline)")

const seqID = 1

// Write writes p as a Perfetto protobuf trace.
func Write(w io.Writer, p *symbolizer.Profile) error {
	tl := p.Timeline
	if tl == nil {
		return ErrNoTimeline
	}
	bw := bufio.NewWriter(w)
	e := &encoder{w: bw, p: p, ft: frames.New(p), strs: map[strKey]uint64{}, mods: map[*symbolizer.Module]uint64{},
		frames: map[frameKey]uint64{}, stacks: map[string]uint64{}}
	e.run(tl)
	if e.err != nil {
		return e.err
	}
	return bw.Flush()
}

type strKey struct {
	field number
	s     string
}

type frameKey struct{ loc, inline int }

type encoder struct {
	w    *bufio.Writer
	err  error
	p    *symbolizer.Profile
	ft   *frames.Table
	pkt  []byte // packet being built
	msg  []byte // scratch
	tmp  []byte
	intd []byte // InternedData of the first packet

	strs   map[strKey]uint64 // interned strings per InternedData field
	nStr   map[number]uint64
	mods   map[*symbolizer.Module]uint64
	frames map[frameKey]uint64
	stacks map[string]uint64
	key    []byte
}

// packet writes one TracePacket (field 1 of Trace) with body b.
func (e *encoder) packet(b []byte) {
	if e.err != nil {
		return
	}
	e.tmp = appendUvarint(appendTag(e.tmp[:0], fTracePacket, wireBytes), uint64(len(b)))
	if _, err := e.w.Write(e.tmp); err != nil {
		e.err = err
		return
	}
	if _, err := e.w.Write(b); err != nil {
		e.err = err
	}
}

// The protobuf wire encoding, the four pieces this package needs. (The
// protobuf module's protowire does the same, but linking it runs its
// internal/detrand init, which hashes the executable, in every rawstack
// command at start-up; the test decodes with protowire.)

type number int32

const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
)

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendTag(b []byte, f number, wire uint64) []byte {
	return appendUvarint(b, uint64(f)<<3|wire)
}

func appendVarint(b []byte, f number, v uint64) []byte {
	return appendUvarint(appendTag(b, f, wireVarint), v)
}

func appendBytes(b []byte, f number, v []byte) []byte {
	b = appendUvarint(appendTag(b, f, wireBytes), uint64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, f number, v string) []byte {
	b = appendUvarint(appendTag(b, f, wireBytes), uint64(len(v)))
	return append(b, v...)
}

func appendDouble(b []byte, f number, v float64) []byte {
	b = appendTag(b, f, wireFixed64)
	u := math.Float64bits(v)
	return append(b, byte(u), byte(u>>8), byte(u>>16), byte(u>>24), byte(u>>32), byte(u>>40), byte(u>>48), byte(u>>56))
}

// intern returns the iid of s in InternedData field f, adding it.
func (e *encoder) intern(f number, s string) uint64 {
	k := strKey{f, s}
	if id, ok := e.strs[k]; ok {
		return id
	}
	if e.nStr == nil {
		e.nStr = map[number]uint64{}
	}
	e.nStr[f]++
	id := e.nStr[f]
	e.strs[k] = id
	m := appendVarint(nil, fStringIID, id)
	m = appendString(m, fStringStr, s)
	e.intd = appendBytes(e.intd, f, m)
	return id
}

func (e *encoder) mapping(m *symbolizer.Module) uint64 {
	if id, ok := e.mods[m]; ok {
		return id
	}
	id := uint64(len(e.mods) + 1)
	e.mods[m] = id
	mb := appendVarint(nil, fMappingIID, id)
	if bid := m.BuildIDHex(); bid != "" {
		mb = appendVarint(mb, fMappingBuildID, e.intern(fInternedBuildIDs, bid))
	}
	mb = appendVarint(mb, fMappingStartOffset, m.FileOffset)
	mb = appendVarint(mb, fMappingStart, m.Base)
	mb = appendVarint(mb, fMappingEnd, m.Base+m.Size)
	for _, c := range strings.Split(strings.TrimPrefix(m.Path, "/"), "/") {
		mb = appendVarint(mb, fMappingPathIDs, e.intern(fInternedMappingPaths, c))
	}
	e.intd = appendBytes(e.intd, fInternedMappings, mb)
	return id
}

// frame returns the iid of inline frame j of location li.
func (e *encoder) frame(li, j int) uint64 {
	k := frameKey{li, j}
	if id, ok := e.frames[k]; ok {
		return id
	}
	id := uint64(len(e.frames) + 1)
	e.frames[k] = id
	l := e.p.Locations[li]
	fb := appendVarint(nil, fFrameIID, id)
	fb = appendVarint(fb, fFrameFunctionName, e.intern(fInternedFunctionNames, l.FunctionName(j)))
	if l.Module != nil {
		fb = appendVarint(fb, fFrameMapping, e.mapping(l.Module))
	}
	fb = appendVarint(fb, fFrameRelPC, l.Addr)
	if j < len(l.Frames) {
		if f := l.Frames[j]; f.File != "" {
			fb = appendVarint(fb, fFrameSourcePath, e.intern(fInternedSourcePaths, f.File))
			if f.Line > 0 {
				fb = appendVarint(fb, fFrameLine, uint64(f.Line))
			}
		}
	}
	e.intd = appendBytes(e.intd, fInternedFrames, fb)
	return id
}

// callstack returns the iid of a leaf-first location list (0 when empty).
func (e *encoder) callstack(locs []int) uint64 {
	if len(locs) == 0 {
		return 0
	}
	e.key = e.key[:0]
	for _, l := range locs {
		e.key = appendUvarint(e.key, uint64(l))
	}
	if id, ok := e.stacks[string(e.key)]; ok {
		return id
	}
	id := uint64(len(e.stacks) + 1)
	e.stacks[string(e.key)] = id
	cb := appendVarint(nil, fCallstackIID, id)
	// Outermost first: the last location's outermost inline frame.
	for i := len(locs) - 1; i >= 0; i-- {
		l := e.p.Locations[locs[i]]
		n := len(l.Frames)
		if n == 0 {
			n = 1
		}
		for j := n - 1; j >= 0; j-- {
			cb = appendVarint(cb, fCallstackFrames, e.frame(locs[i], j))
		}
	}
	e.intd = appendBytes(e.intd, fInternedCallstacks, cb)
	return id
}

// Track uuids: processes, threads and counters numbered in order.
func processUUID(i int) uint64 { return 1<<32 | uint64(i) }
func threadUUID(i int) uint64  { return 2<<32 | uint64(i) }
func counterUUID(i int) uint64 { return 3<<32 | uint64(i) }

func (e *encoder) start(t int64) []byte { return e.startPacket(t, seqNeedsIncrementalData) }
func (e *encoder) startPacket(t int64, flags uint64) []byte {
	b := e.pkt[:0]
	if t >= 0 {
		b = appendVarint(b, fPacketTimestamp, uint64(t))
	}
	b = appendVarint(b, fPacketSequenceID, seqID)
	b = appendVarint(b, fPacketSequenceFlags, flags)
	return b
}

func (e *encoder) run(tl *symbolizer.Timeline) {
	// Intern every stack first: the first packet carries them all.
	for _, th := range tl.Threads {
		for _, s := range th.Samples {
			e.callstack(s.Locs)
		}
	}
	first := e.startPacket(tl.Start, seqIncrementalCleared)
	first = appendVarint(first, fPacketFirstOnSequence, 1)
	first = appendBytes(first, fPacketInternedData, e.intd)
	e.packet(first)

	procIdx := map[uint32]int{}
	for i, pr := range tl.Processes {
		procIdx[pr.Pid] = i
		d := appendVarint(nil, fTrackUUID, processUUID(i))
		pd := appendVarint(nil, fProcessPid, uint64(pr.Pid))
		if pr.Name != "" {
			pd = appendString(pd, fProcessName, pr.Name)
		}
		d = appendBytes(d, fTrackProcess, pd)
		e.packet(appendBytes(e.start(-1), fPacketTrackDescriptor, d))
	}
	for i, th := range tl.Threads {
		d := appendVarint(nil, fTrackUUID, threadUUID(i))
		d = appendVarint(d, fTrackParent, processUUID(procIdx[th.Pid]))
		if th.Goroutine != 0 {
			// A goroutine's track: named, under its process, not a
			// thread (Perfetto merges thread tracks by tid).
			d = appendString(d, fTrackName, th.Name)
			e.packet(appendBytes(e.start(-1), fPacketTrackDescriptor, d))
			continue
		}
		td := appendVarint(nil, fThreadPid, uint64(th.Pid))
		td = appendVarint(td, fThreadTid, uint64(th.Tid))
		if th.Name != "" {
			td = appendString(td, fThreadName, th.Name)
		}
		d = appendBytes(d, fTrackThread, td)
		e.packet(appendBytes(e.start(-1), fPacketTrackDescriptor, d))
	}
	for ti, th := range tl.Threads {
		for _, s := range th.Samples {
			ps := appendVarint(nil, fPerfSamplePid, uint64(th.Pid))
			ps = appendVarint(ps, fPerfSampleTid, uint64(th.Tid))
			if id := e.callstack(s.Locs); id != 0 {
				ps = appendVarint(ps, fPerfSampleCallstack, id)
			}
			e.packet(appendBytes(e.start(s.Time), fPacketPerfSample, ps))
		}
		track := threadUUID(ti)
		// Begin and end events in time order, ends first at equal times,
		// so slices nest on the track.
		var stack []int64
		slice := func(t int64, typ uint64, name string, link *format.SpanLink) {
			ev := appendVarint(nil, fEventType, typ)
			ev = appendVarint(ev, fEventTrackUUID, track)
			if name != "" {
				ev = appendString(ev, fEventName, name)
			}
			if link != nil && !link.IsZero() {
				ev = appendBytes(ev, fEventDebugAnnotations, appendString(appendString(nil, fAnnotationName, "trace_id"), fAnnotationString, hex.EncodeToString(link.TraceID[:])))
				ev = appendBytes(ev, fEventDebugAnnotations, appendString(appendString(nil, fAnnotationName, "span_id"), fAnnotationString, hex.EncodeToString(link.SpanID[:])))
			}
			if typ != typeSliceEnd {
				ev = appendString(ev, fEventCategories, "rawstack")
			}
			e.packet(appendBytes(e.start(t), fPacketTrackEvent, ev))
		}
		closeTo := func(t int64) {
			for len(stack) > 0 && stack[len(stack)-1] <= t {
				slice(stack[len(stack)-1], typeSliceEnd, "", nil)
				stack = stack[:len(stack)-1]
			}
		}
		for i := range th.Spans {
			s := &th.Spans[i]
			closeTo(s.Begin)
			slice(s.Begin, typeSliceBegin, s.Name, &s.Link)
			stack = append(stack, s.End)
		}
		closeTo(math.MaxInt64)
		for _, m := range th.Markers {
			slice(m.Time, typeInstant, m.Name, nil)
		}
	}
	if len(tl.Counters) > 0 && len(tl.Processes) > 0 {
		for i, c := range tl.Counters {
			d := appendVarint(nil, fTrackUUID, counterUUID(i))
			d = appendVarint(d, fTrackParent, processUUID(0))
			d = appendString(d, fTrackName, c.Name)
			d = appendBytes(d, fTrackCounter, nil)
			e.packet(appendBytes(e.start(-1), fPacketTrackDescriptor, d))
			for _, pt := range c.Points {
				ev := appendVarint(nil, fEventType, typeCounter)
				ev = appendVarint(ev, fEventTrackUUID, counterUUID(i))
				ev = appendDouble(ev, fEventDoubleValue, pt.Value)
				e.packet(appendBytes(e.start(pt.Time), fPacketTrackEvent, ev))
			}
		}
	}
}
