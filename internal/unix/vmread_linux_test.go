package unix

import (
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"unsafe"
)

// memoWord is read by TestRangeReaderMemo at a fixed address (a
// goroutine's stack moves).
var memoWord uint64

// A memoized RangeReader answers a batch's repeated reads from memory, and
// reads the target again after Batch.
func TestRangeReaderMemo(t *testing.T) {
	pid := uint32(os.Getpid())
	word := &memoWord
	atomic.StoreUint64(word, 1)
	addr := uint64(uintptr(unsafe.Pointer(word)))
	read := func(r *RangeReader) uint64 {
		t.Helper()
		var b [8]byte
		if !r.Read(pid, addr, b[:]) {
			t.Fatalf("reading this process at %#x failed", addr)
		}
		return *(*uint64)(unsafe.Pointer(&b[0]))
	}
	var plain, memo RangeReader
	memo.Batch()
	if read(&plain) != 1 || read(&memo) != 1 {
		t.Fatal("first reads: want 1")
	}
	atomic.StoreUint64(word, 2)
	if v := read(&plain); v != 2 {
		t.Errorf("without Batch, read %d after the change, want 2", v)
	}
	if v := read(&memo); v != 1 {
		t.Errorf("in a batch, the second second read gave %d, want its first read's 1", v)
	}
	memo.Batch()
	if v := read(&memo); v != 2 {
		t.Errorf("after Batch, read %d, want 2", v)
	}
	// An unreadable range stays unreadable within the batch, without
	// another system call, and a longer read is not taken from memory.
	var b [8]byte
	if memo.Read(pid, 8, b[:]) || memo.Read(pid, 8, b[:]) {
		t.Error("address 8 read as readable")
	}
	long := make([]byte, memoMaxRead+1)
	if !memo.Read(pid, uint64(uintptr(unsafe.Pointer(&long[0]))), long) {
		t.Error("long read failed")
	}
	if len(memo.memo) != 2 {
		t.Errorf("%d reads remembered, want 2 (the word, the unreadable range)", len(memo.memo))
	}
}

// The memo is bounded: past memoMaxReads distinct reads a batch reads the
// target every time, and a batch's reads allocate nothing once its memory
// has grown.
func TestRangeReaderMemoBounds(t *testing.T) {
	pid := uint32(os.Getpid())
	buf := make([]byte, 8*(memoMaxReads+8))
	base := uint64(uintptr(unsafe.Pointer(&buf[0])))
	var r RangeReader
	r.Batch()
	var b [8]byte
	for i := 0; i < memoMaxReads+8; i++ {
		if !r.Read(pid, base+8*uint64(i), b[:]) {
			t.Fatal("read failed")
		}
	}
	if len(r.memo) != memoMaxReads {
		t.Errorf("%d reads remembered, want the cap %d", len(r.memo), memoMaxReads)
	}
	allocs := testing.AllocsPerRun(20, func() {
		r.Batch()
		for i := 0; i < 64; i++ {
			r.Read(pid, base+8*uint64(i%16), b[:])
		}
	})
	if allocs != 0 {
		t.Errorf("a batch of reads allocated %.1f times, want 0", allocs)
	}
	runtime.KeepAlive(buf)
}
