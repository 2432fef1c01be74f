//go:build linux

package tracking

import (
	"encoding/binary"
	"testing"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/internal/linuxtest"
)

func commRecord(pid, tid uint32, name string, exec bool) []byte {
	le := binary.LittleEndian
	c := append([]byte(name), 0)
	for len(c)%8 != 0 {
		c = append(c, 0)
	}
	n := 8 + 8 + len(c) + sampleIDSize
	b := make([]byte, n)
	le.PutUint32(b, recComm)
	if exec {
		le.PutUint16(b[4:], miscCommExec)
	}
	le.PutUint16(b[6:], uint16(n))
	le.PutUint32(b[8:], pid)
	le.PutUint32(b[12:], tid)
	copy(b[16:], c)
	return b
}

func forkRecord(typ uint32, pid, ppid, tid, ptid uint32) []byte {
	le := binary.LittleEndian
	n := 8 + 24 + sampleIDSize
	b := make([]byte, n)
	le.PutUint32(b, typ)
	le.PutUint16(b[6:], uint16(n))
	le.PutUint32(b[8:], pid)
	le.PutUint32(b[12:], ppid)
	le.PutUint32(b[16:], tid)
	le.PutUint32(b[20:], ptid)
	return b
}

// TestReplayTracking replays a fork, an exec and mappings and checks the
// module and thread events the handler sees.
func TestReplayTracking(t *testing.T) {
	h := &linuxtest.CountHandler{}
	s := NewReplay(100, h)
	var recs []byte
	recs = append(recs, mmap2Record(100, 100, 0x400000, 0x1000, 0, 5, "/nonexistent/a.out")...)
	recs = append(recs, forkRecord(recFork, 100, 100, 101, 100)...) // thread
	recs = append(recs, forkRecord(recFork, 200, 100, 200, 101)...) // process: inherits a.out
	recs = append(recs, commRecord(200, 200, "child", true)...)     // exec: drops it
	recs = append(recs, mmap2Record(200, 200, 0x500000, 0x1000, 0, 5, "/nonexistent/b.out")...)
	recs = append(recs, sampleRecord(200, 200, perfContextUser, 0x500010)...)
	recs = append(recs, forkRecord(recExit, 200, 100, 200, 101)...)
	if n := s.Replay(recs); n != len(recs) {
		t.Fatalf("replayed %d of %d bytes", n, len(recs))
	}
	if h.Modules != 3 || h.Threads != 2 || h.Samples != 1 {
		t.Errorf("modules %d (want 3), threads %d (want 2), samples %d (want 1)", h.Modules, h.Threads, h.Samples)
	}
	if ps := s.procs[200]; ps != nil {
		t.Errorf("exited process still tracked: %+v", ps)
	}
	if ps := s.procs[100]; ps == nil || len(ps.modules) != 1 {
		t.Errorf("parent modules: %+v", ps)
	}
}

// TestReplayGroupExit: in an exit_group the leader's EXIT record can come
// before a sibling's, which is still sampled in do_exit with its user
// stack; the process's modules must stay until its last thread is gone.
func TestReplayGroupExit(t *testing.T) {
	h := &linuxtest.CountHandler{}
	s := NewReplay(1, h)
	var recs []byte
	recs = append(recs, forkRecord(recFork, 300, 1, 300, 1)...) // process
	recs = append(recs, mmap2Record(300, 300, 0x400000, 0x1000, 0, 5, "/nonexistent/a.out")...)
	recs = append(recs, forkRecord(recFork, 300, 300, 301, 300)...) // thread
	recs = append(recs, forkRecord(recExit, 300, 300, 300, 300)...) // leader first
	s.Replay(recs)
	if ps := s.procs[300]; ps == nil || len(ps.modules) != 1 {
		t.Fatalf("after the leader's EXIT, with thread 301 still running: %+v", ps)
	}
	recs = append(sampleRecord(300, 301, perfContextUser, 0x400010), forkRecord(recExit, 300, 300, 301, 300)...)
	s.Replay(recs)
	if h.Samples != 1 {
		t.Errorf("%d samples, want 1", h.Samples)
	}
	if ps := s.procs[300]; ps != nil {
		t.Errorf("after the last thread's EXIT the process is still tracked: %+v", ps)
	}
}

func throttleRecord(typ uint32, time, id uint64) []byte {
	le := binary.LittleEndian
	n := 8 + 24 + sampleIDSize
	b := make([]byte, n)
	le.PutUint32(b, typ)
	le.PutUint16(b[6:], uint16(n))
	le.PutUint64(b[8:], time)
	le.PutUint64(b[16:], id)
	return b
}

func TestReplayThrottle(t *testing.T) {
	h := &linuxtest.CountHandler{}
	s := NewReplay(100, h)
	s.cfg.Frequency = 1000
	recs := append(throttleRecord(recThrottle, 1e9, 7), throttleRecord(recUnthrottle, 1.25e9, 7)...)
	s.Replay(recs)
	if h.NLost != 250 {
		t.Errorf("throttled for 250 ms at 1000 Hz: %d lost, want 250", h.NLost)
	}
}

func FuzzReplay(f *testing.F) {
	f.Add(append(throttleRecord(recThrottle, 1e9, 7), throttleRecord(recUnthrottle, 1.25e9, 7)...))
	f.Add(mmap2Record(100, 100, 0x400000, 0x1000, 0, 5, "/nonexistent/a.out"))
	f.Add(forkRecord(recFork, 200, 100, 200, 101))
	f.Add(commRecord(200, 200, "child", true))
	f.Add(sampleRecord(7, 9, perfContextKern, 0xffffffff81000010, perfContextUser, 0x401000, 0x402000))
	f.Fuzz(func(t *testing.T, b []byte) {
		h := &boundHandler{t: t, max: len(b)}
		s := NewReplay(100, h)
		n := s.Replay(b)
		// Replay consumes whole records and stops only at a truncated
		// or malformed header.
		recs, off := 0, 0
		for len(b)-off >= 8 {
			size := int(b[off+6]) | int(b[off+7])<<8
			if size < 8 || off+size > len(b) {
				break
			}
			off += size
			recs++
		}
		if n != off {
			t.Fatalf("Replay consumed %d of %d bytes, the records end at %d", n, len(b), off)
		}
		if h.samples > recs {
			t.Fatalf("%d samples from %d records", h.samples, recs)
		}
		first, firstPCs := h.samples, h.pcs
		if n2 := s.Replay(b); n2 != n { // records against the state the first pass left
			t.Fatalf("second pass consumed %d bytes, the first %d", n2, n)
		}
		// A fresh session gives the same events.
		h2 := &boundHandler{t: t, max: len(b)}
		NewReplay(100, h2).Replay(b)
		if h2.samples != first || h2.pcs != firstPCs {
			t.Fatalf("two replays of the same records: %d and %d samples, %d and %d PCs", first, h2.samples, firstPCs, h2.pcs)
		}
	})
}

// boundHandler checks that what a replay reports is bounded by the bytes
// it came from: a sample's PCs, registers and stack copy are read from
// its record.
type boundHandler struct {
	linuxtest.CountHandler
	t       *testing.T
	max     int // bytes replayed
	samples int
	pcs     int // PCs of all samples
}

func (h *boundHandler) Sample(s *platform.Sample) {
	if 8*len(s.PCs) > h.max || 8*len(s.Regs) > h.max || len(s.Stack) > h.max {
		h.t.Fatalf("sample with %d PCs, %d registers, %d stack bytes from %d bytes of records", len(s.PCs), len(s.Regs), len(s.Stack), h.max)
	}
	h.samples++
	h.pcs += len(s.PCs)
}
