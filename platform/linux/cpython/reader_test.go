package cpython

import (
	"encoding/binary"
	"testing"
)

// fakeMemory is a target's memory as 8-byte words by address, for the
// Reader's thread-state search.
type fakeMemory map[uint64]uint64

func (m fakeMemory) read(_ uint32, addr uint64, buf []byte) bool {
	for i := 0; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], m[addr+uint64(i)])
	}
	return true
}

func (m fakeMemory) read2(pid uint32, a1 uint64, n1 int, a2 uint64, n2 int, buf []byte) int {
	m.read(pid, a1, buf[:n1])
	m.read(pid, a2, buf[n1:n1+n2])
	return n1 + n2
}

// TestMissRetried holds the Reader to finding a thread whose state its
// interpreter makes after the thread was first sampled (the main thread
// during start-up, a new thread before it binds its state) within a few
// milliseconds, while a thread that never gets one is not searched for
// at every sample.
func TestMissRetried(t *testing.T) {
	const (
		pid, tid, other       = 10, 11, 12
		runtime, interp, ts   = 0x1000, 0x2000, 0x3000
		ms                    = int64(1e6)
		samplesPerMillisecond = 1
	)
	mem := fakeMemory{}
	in := &Interp{runtime: runtime, lay: layout{interpretersHead: 0, threadsHead: 8, tsNext: 0, tsNativeID: 8, tsFrame: 16}}
	r := NewReader(mem.read, mem.read2)
	found := map[uint32]int64{}
	now := int64(0)
	r.SetOnThread(func(_, tid uint32, _, _ uint64) { found[tid] = now })
	r.Attach(pid, in, 0)

	walks := 0
	read := r.read
	r.read = func(pid uint32, addr uint64, buf []byte) bool {
		if addr == runtime {
			walks++
		}
		return read(pid, addr, buf)
	}
	// No interpreter yet: both threads miss.
	for ; now < 30*ms; now += ms / samplesPerMillisecond {
		r.Frames(pid, tid, now)
		r.Frames(pid, other, now)
	}
	if len(found) != 0 {
		t.Fatalf("threads found before their states exist: %v", found)
	}
	// The interpreter makes tid's state at 30 ms.
	made := now
	mem[runtime] = interp
	mem[interp+8] = ts
	mem[ts+8] = tid
	walksBefore := walks
	for ; now < 1030*ms; now += ms / samplesPerMillisecond {
		r.Frames(pid, tid, now)
		r.Frames(pid, other, now)
	}
	at, ok := found[tid]
	if !ok {
		t.Fatalf("thread %d never found", tid)
	}
	if at-made > made+ms { // backing off doubles the wait: at most the time already waited
		t.Errorf("thread %d found %d ms after its state was made at %d ms", tid, (at-made)/ms, made/ms)
	}
	// After it is found, only the thread that has no state walks: it
	// backs off to one walk per retryMiss.
	if n := int64(walks - walksBefore); n > 1000*ms/retryMiss+12 {
		t.Errorf("%d walks in 1000 ms of samples of a thread with no state, want about %d", n, 1000*ms/retryMiss)
	}
	t.Logf("found %d ms after its state was made; %d walks in 1 s for a thread with no state", (at-made)/ms, walks-walksBefore)
}
