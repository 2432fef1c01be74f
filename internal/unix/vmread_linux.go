package unix

import "golang.org/x/sys/unix"

// VMReader reads ranges of another process into separate local buffers
// with one process_vm_readv call, reusing its iovec array between calls.
type VMReader struct{ local []unix.Iovec }

// Read reads remote[i] into local[i] (of the same lengths), in order, and
// returns the bytes read: a read stops at the first unreadable range, and
// the kernel never splits one range.
func (r *VMReader) Read(pid int, local [][]byte, remote []RemoteIovec) (int, error) {
	r.local = r.local[:0]
	for _, b := range local {
		if len(b) == 0 {
			continue
		}
		v := unix.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		r.local = append(r.local, v)
	}
	if len(r.local) == 0 {
		return 0, nil
	}
	return processVMReadv(pid, r.local, remote)
}

// RangeReader reads one range of another process per call, reusing its
// iovec: the memory access of the runtimes' frame readers (CPython, V8,
// HotSpot).
//
// Once [RangeReader.Batch] has been called, a read of the same bytes as
// an earlier one of the same batch is answered from memory: the samples
// read at one time, which a JIT's frame reader checks against the same
// code headers and functions, then cost one system call for each object
// instead of one for each sample. The memory is read as it was at the
// batch's first read of it, milliseconds before, where the samples were
// taken up to a read interval before that.
type RangeReader struct {
	iov     [1]RemoteIovec
	batched bool              // Batch was called: reads are remembered
	memo    map[memoKey]int32 // offset in arena; -1: unreadable
	arena   []byte
}

type memoKey struct {
	addr uint64
	pid  uint32
	n    uint32
}

// Bounds of a batch's memory: reads larger than memoMaxRead, or past
// memoMaxBytes or memoMaxReads in a batch, go to the target every time.
const (
	memoMaxRead  = 512
	memoMaxBytes = 1 << 20
	memoMaxReads = 1 << 14
)

// Batch starts a new batch of reads: nothing read before is answered
// from memory, and what is read now is remembered until the next Batch.
func (r *RangeReader) Batch() {
	r.batched = true
	clear(r.memo)
	r.arena = r.arena[:0]
}

// Read reads len(buf) bytes of process pid at addr into buf and reports
// whether all of them could be read.
func (r *RangeReader) Read(pid uint32, addr uint64, buf []byte) bool {
	if !r.batched || len(buf) > memoMaxRead || len(buf) == 0 {
		return r.read(pid, addr, buf)
	}
	k := memoKey{addr: addr, pid: pid, n: uint32(len(buf))}
	if off, ok := r.memo[k]; ok {
		if off < 0 {
			return false
		}
		copy(buf, r.arena[off:])
		return true
	}
	ok := r.read(pid, addr, buf)
	if len(r.arena)+len(buf) > memoMaxBytes || len(r.memo) >= memoMaxReads {
		return ok
	}
	if r.memo == nil {
		r.memo = make(map[memoKey]int32)
	}
	if !ok {
		r.memo[k] = -1
		return false
	}
	r.memo[k] = int32(len(r.arena))
	r.arena = append(r.arena, buf...)
	return true
}

func (r *RangeReader) read(pid uint32, addr uint64, buf []byte) bool {
	r.iov[0] = RemoteIovec{Base: uintptr(addr), Len: len(buf)}
	n, err := ProcessVMRead(int(pid), buf, r.iov[:1])
	return err == nil && n == len(buf)
}
