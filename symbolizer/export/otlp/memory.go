package otlp

import (
	"crypto/rand"
	"sort"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/format"
)

// Memory profiles (format/SPEC.md §6.22–6.23). Each batch gets, per
// process that allocated or freed since the previous one, the sample
// types of a Go heap profile: "alloc_objects"/"count" and
// "alloc_space"/"bytes" for the allocations of the batch (one value per
// timestamp, as CPU samples), and "inuse_objects"/"count" and
// "inuse_space"/"bytes" for what every sampled allocation so far still
// holds at the end of the batch (one value per stack, stamped with the
// batch's last memory event).

type memKey struct {
	pid   uint32
	stack uint64
}

type liveKey struct {
	pid  uint32
	addr uint64
}

type liveBlock struct {
	stack          uint64
	bytes, objects int64
}

type pendingAlloc struct {
	time           int64
	pid, tid       uint32
	stack          uint64
	bytes, objects int64
}

// memState is a Builder's memory bookkeeping.
type memState struct {
	allocs  []pendingAlloc
	inuse   map[memKey][2]int64 // bytes, objects
	live    map[liveKey]liveBlock
	touched map[uint32]int64 // pids with memory events since the last Flush → their last time
	events  int              // Alloc and matched Free events since the last Flush
	// unmatched counts frees of addresses no sampled allocation held.
	unmatched int64
}

func (b *Builder) memEvent(ev *format.Event) {
	m := &b.mem
	if m.inuse == nil {
		m.inuse, m.live, m.touched = map[memKey][2]int64{}, map[liveKey]liveBlock{}, map[uint32]int64{}
	}
	switch ev.Kind {
	case format.KindAlloc:
		a := &ev.Alloc
		m.allocs = append(m.allocs, pendingAlloc{a.Time, a.Pid, a.Tid, a.Stack, int64(a.Bytes), int64(a.Objects)})
		m.add(a.Pid, a.Stack, int64(a.Bytes), int64(a.Objects))
		if a.Addr != 0 {
			k := liveKey{a.Pid, a.Addr}
			if old, ok := m.live[k]; ok { // its free was lost
				m.add(a.Pid, old.stack, -old.bytes, -old.objects)
			}
			m.live[k] = liveBlock{a.Stack, int64(a.Bytes), int64(a.Objects)}
		}
		m.touch(a.Pid, a.Time)
		m.events++
	case format.KindFree:
		f := &ev.Free
		if f.Addr != 0 {
			k := liveKey{f.Pid, f.Addr}
			l, ok := m.live[k]
			if !ok {
				m.unmatched++
				return
			}
			delete(m.live, k)
			m.add(f.Pid, l.stack, -l.bytes, -l.objects)
		} else {
			m.add(f.Pid, f.Stack, -int64(f.Bytes), -int64(f.Objects))
		}
		m.touch(f.Pid, f.Time)
		m.events++
	}
}

// flushed forgets the batch's allocations.
func (m *memState) flushed() {
	m.allocs = m.allocs[:0]
	m.events = 0
	clear(m.touched)
}

func (m *memState) add(pid uint32, stack uint64, bytes, objects int64) {
	k := memKey{pid, stack}
	v := m.inuse[k]
	v[0] += bytes
	v[1] += objects
	if v == [2]int64{} {
		delete(m.inuse, k)
		return
	}
	m.inuse[k] = v
}

func (m *memState) touch(pid uint32, t int64) {
	if last, ok := m.touched[pid]; !ok || t > last {
		m.touched[pid] = t
	}
}

// memProfiles appends the memory profiles of pid to sp.
func (b *Builder) memProfiles(d *dict, sp pprofile.ScopeProfiles, pid uint32) {
	m := &b.mem
	last, ok := m.touched[pid]
	if !ok {
		return
	}
	var allocs []pendingAlloc
	for _, a := range m.allocs {
		if a.pid == pid {
			allocs = append(allocs, a)
		}
	}
	if len(allocs) > 0 {
		b.allocProfile(d, sp.Profiles().AppendEmpty(), allocs, "alloc_objects", "count", func(a *pendingAlloc) int64 { return a.objects })
		b.allocProfile(d, sp.Profiles().AppendEmpty(), allocs, "alloc_space", "bytes", func(a *pendingAlloc) int64 { return a.bytes })
	}
	var stacks []uint64
	for k := range m.inuse {
		if k.pid == pid {
			stacks = append(stacks, k.stack)
		}
	}
	if len(stacks) == 0 {
		return
	}
	sort.Slice(stacks, func(i, j int) bool { return stacks[i] < stacks[j] })
	for col, typ := range [2][2]string{{"inuse_space", "bytes"}, {"inuse_objects", "count"}} {
		pr := sp.Profiles().AppendEmpty()
		b.memHeader(d, pr, typ[0], typ[1], last, last)
		for _, st := range stacks {
			ps := pr.Samples().AppendEmpty()
			ps.SetStackIndex(b.stack(d, &pendingSample{time: last, pid: pid, stack: st}))
			ps.TimestampsUnixNano().Append(b.wall(last))
			ps.Values().Append(max(m.inuse[memKey{pid, st}][col], 0))
		}
	}
}

func (b *Builder) memHeader(d *dict, pr pprofile.Profile, typ, unit string, first, last int64) {
	pr.SampleType().SetTypeStrindex(d.str(typ))
	pr.SampleType().SetUnitStrindex(d.str(unit))
	var id pprofile.ProfileID
	rand.Read(id[:])
	pr.SetProfileID(id)
	setRange(pr, b.wall(first), b.wall(last))
}

// allocProfile writes the allocations of one process, one Sample per
// (stack, thread) with one value per allocation event.
func (b *Builder) allocProfile(d *dict, pr pprofile.Profile, allocs []pendingAlloc, typ, unit string, val func(*pendingAlloc) int64) {
	first, last := allocs[0].time, allocs[0].time
	for _, a := range allocs {
		first, last = min(first, a.time), max(last, a.time)
	}
	b.memHeader(d, pr, typ, unit, first, last)
	agg := map[sampleKey]pprofile.Sample{}
	for i := range allocs {
		a := &allocs[i]
		st := b.stack(d, &pendingSample{time: a.time, pid: a.pid, tid: a.tid, stack: a.stack})
		k := sampleKey{stack: st, tid: a.tid}
		ps, ok := agg[k]
		if !ok {
			ps = pr.Samples().AppendEmpty()
			ps.SetStackIndex(st)
			if a.tid != 0 {
				ps.AttributeIndices().Append(d.intAttr(AttrThreadID, int64(a.tid)))
			}
			agg[k] = ps
		}
		ps.TimestampsUnixNano().Append(b.wall(a.time))
		ps.Values().Append(val(a))
	}
}
