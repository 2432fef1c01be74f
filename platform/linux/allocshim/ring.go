package allocshim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
)

// The shared ring: the recorder creates a file of RingHeader bytes and a
// power of two of record bytes, maps it, and names it to the command in
// RingEnv. The sampler in every process of the command maps it too and,
// instead of calling [AllocSymbol] (a trap into the kernel, where a BPF
// program copies the stack), writes there itself what that program would
// have written: the allocation's registers and stack as a BPF sample
// record (kind 4; with RingFP the return addresses of its frame-pointer
// chain instead), its block as a header-only record (kind 5), and every
// free of a sampled block, at once, as another (kind 6), all in the
// layout of the sample records of platform/linux/tracking. The markers stay for what the
// ring cannot take (a process that cannot open the file, a thread whose
// stack the sampler does not know).
//
// The header (little-endian):
//
//	0    magic "RSAR" (0x52415352), version (3), u32 each
//	8    size: bytes of records, a power of two, u64
//	16   stack_bytes: stack copied per allocation, at most, u32
//	20   flags, u32: 1 (RingWait) says the recorder has no markers: a
//	     writer waits for room while the recorder reads, and a record
//	     that cannot go into the ring is dropped (counted in dropped);
//	     2 (RingFP) says an allocation's record carries the return
//	     addresses of the frame-pointer chain (the sampler walks it in
//	     the thread's stack) instead of registers and a stack copy
//	24   pidns: the inode of the recorder's pid namespace, u64 (0:
//	     unknown); a process in another writes no records (its pids
//	     are not the recorder's) and takes the markers
//	64   lock: the writing thread's id, 0 when free, u32
//	128  head: bytes written (the writers'), u64
//	192  tail: bytes read (the recorder's), u64
//	256  spilled: records that went to the markers instead (the ring
//	     full, its lock held too long), u64
//	264  lost_set: allocations dropped (the sampler's set of sampled
//	     blocks was full), u64
//	272  alive: CLOCK_MONOTONIC of the recorder's last read, ns, u64 (0:
//	     none yet); a sampler that finds it AliveTimeout old goes inert
//	280  detached, u32: 1 the recorder left (a clean detach), 2 the
//	     sampler went inert because the recorder stopped stamping
//	288  dropped: records lost with no markers to take them, u64
//
// The records start at RingHeader. Each has an 8-byte prefix: its length
// (prefix included, a multiple of 8) and 0, or for padding up to the end
// of the ring (when a record does not fit before it) the padding's length
// and 1. A record never wraps. Writers take the lock, write a record,
// then store head; the recorder reads up to head, then stores tail.
const (
	// RingEnv names the ring file to the sampler.
	RingEnv = "RAWSTACK_ALLOC_RING"
	// RingHeader is the size of the header page.
	RingHeader = 4096

	ringMagic   = 0x52415352
	ringVersion = 3
	offSize     = 8
	offStack    = 16
	offFlags    = 20
	offPidNS    = 24
	offHead     = 128
	offTail     = 192
	offSpilled  = 256
	offLostSet  = 264
	offAlive    = 272
	offDetached = 280
	offDropped  = 288
	// MaxRingStack is the most stack bytes a ring record may carry, as
	// the BPF programs' MAX_STACK.
	MaxRingStack = 16384
	minRingSize  = 1 << 16

	// RingWait is the flag of a ring whose recorder puts no uprobes on
	// the markers (the perf back end).
	RingWait = 1
	// RingFP is the flag of a ring whose records carry the frame-pointer
	// chain of each sampled allocation, walked by the sampler (a
	// frame-pointer recording without markers), instead of its stack.
	RingFP = 2
	// AliveTimeout is how old the recorder's stamp may be before a
	// sampler takes the recorder for gone (killed) and goes inert: the
	// recorder stamps at every read, every 20 ms or so, 100 ms at most.
	AliveTimeout = 5 * time.Second
	// DetachClean and DetachSilent are the values of the detached word:
	// the recorder left, or the sampler stopped hearing from it.
	DetachClean  = 1
	DetachSilent = 2
)

// ErrRingCorrupt says a record prefix in the ring is not one the sampler
// writes: its length is out of range or runs past what was written.
var ErrRingCorrupt = errors.New("allocation ring: malformed record")

// Ring is the recorder's side of the shared ring in mem (the whole file,
// header included, mapped shared). It is used from one goroutine.
type Ring struct {
	mem  []byte
	data []byte
	size uint64
	tail uint64
	head uint64 // last head loaded
	cur  uint64 // length of the record Next returned, prefix included
	path string
	done func() error
}

// NewRing initializes the ring header in mem (RingHeader bytes then a
// power of two of record bytes, at least 64 KiB, zeroed) for allocations
// that copy up to stackBytes of stack, written by processes of pid
// namespace pidNS (its inode; 0: any), and returns the recorder's side
// of it. path is the file it maps, and done releases it (for Close).
func NewRing(mem []byte, stackBytes int, pidNS uint64, path string, done func() error) (*Ring, error) {
	return newRing(mem, stackBytes, pidNS, 0, path, done)
}

func newRing(mem []byte, stackBytes int, pidNS uint64, flags uint32, path string, done func() error) (*Ring, error) {
	if len(mem) <= RingHeader {
		return nil, fmt.Errorf("allocation ring %s: %d bytes", path, len(mem))
	}
	size := uint64(len(mem) - RingHeader)
	if size < minRingSize || size&(size-1) != 0 || size > 1<<31 {
		return nil, fmt.Errorf("allocation ring %s: %d bytes of records, want a power of two from %d to 2 GiB", path, size, minRingSize)
	}
	if stackBytes < 0 || stackBytes > MaxRingStack {
		return nil, fmt.Errorf("allocation ring %s: %d stack bytes, want at most %d", path, stackBytes, MaxRingStack)
	}
	le := binary.LittleEndian
	le.PutUint64(mem[offSize:], size)
	le.PutUint32(mem[offStack:], uint32(stackBytes))
	le.PutUint64(mem[offPidNS:], pidNS)
	le.PutUint32(mem[offFlags:], flags)
	le.PutUint32(mem[4:], ringVersion)
	// The magic last: a sampler that maps the file early sees a whole
	// header or none.
	atomic.StoreUint32(u32(mem, 0), ringMagic)
	return &Ring{mem: mem, data: mem[RingHeader:], size: size, path: path, done: done}, nil
}

func u32(b []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
func u64(b []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }

// Path returns the file the ring is in (for RingEnv).
func (r *Ring) Path() string { return r.path }

// Next returns the next record written and not yet read, or false when
// there is none. The record stays valid until [Ring.Advance]. A prefix
// the sampler would not write makes Next skip everything written so far
// and return ErrRingCorrupt (the ring's other records cannot be found).
func (r *Ring) Next() ([]byte, bool, error) {
	for {
		if r.tail == r.head {
			r.head = atomic.LoadUint64(u64(r.mem, offHead))
			if r.tail == r.head {
				return nil, false, nil
			}
		}
		avail := r.head - r.tail
		off := r.tail & (r.size - 1)
		if avail > r.size || avail < 8 {
			return nil, false, r.corrupt(off)
		}
		le := binary.LittleEndian
		n, kind := uint64(le.Uint32(r.data[off:])), le.Uint32(r.data[off+4:])
		if n < 8 || n%8 != 0 || n > avail || off+n > r.size || kind > 1 {
			return nil, false, r.corrupt(off)
		}
		if kind == 1 {
			r.tail += n
			atomic.StoreUint64(u64(r.mem, offTail), r.tail)
			continue
		}
		r.cur = n
		return r.data[off+8 : off+n], true, nil
	}
}

// corrupt skips what was written and says where the bad prefix was.
func (r *Ring) corrupt(off uint64) error {
	r.tail = r.head
	atomic.StoreUint64(u64(r.mem, offTail), r.tail)
	return fmt.Errorf("%w: %s at offset %d", ErrRingCorrupt, r.path, RingHeader+off)
}

// Advance consumes the record Next returned: the writers may reuse its
// bytes.
func (r *Ring) Advance() {
	r.tail += r.cur
	r.cur = 0
	atomic.StoreUint64(u64(r.mem, offTail), r.tail)
}

// Stamp tells the samplers that the recorder is there (at time now,
// CLOCK_MONOTONIC ns): a sampler that finds the stamp AliveTimeout old
// goes inert.
func (r *Ring) Stamp(now int64) {
	if r.mem != nil {
		atomic.StoreUint64(u64(r.mem, offAlive), uint64(now))
	}
}

// Detach tells the samplers that the recorder has left: each goes inert
// at its next sampled allocation.
func (r *Ring) Detach() {
	if r.mem != nil {
		atomic.StoreUint32(u32(r.mem, offDetached), DetachClean)
	}
}

// Detached returns the detached word: 0, DetachClean, or DetachSilent
// when a sampler stopped hearing from the recorder.
func (r *Ring) Detached() uint32 { return atomic.LoadUint32(u32(r.mem, offDetached)) }

// Dropped returns how many records the writers lost with no markers to
// take them (RingWait).
func (r *Ring) Dropped() uint64 { return atomic.LoadUint64(u64(r.mem, offDropped)) }

// Counts returns how many records the writers sent to the markers
// instead (the ring full, or its lock held too long by another) and how
// many sampled allocations they dropped because their set of sampled
// blocks was full.
func (r *Ring) Counts() (spilled, lostSet uint64) {
	return atomic.LoadUint64(u64(r.mem, offSpilled)), atomic.LoadUint64(u64(r.mem, offLostSet))
}

// Pending returns the bytes written and not yet read.
func (r *Ring) Pending() uint64 {
	return atomic.LoadUint64(u64(r.mem, offHead)) - r.tail
}

// Size returns the ring's bytes of records.
func (r *Ring) Size() uint64 { return r.size }

// Close releases the ring: its mapping and file.
func (r *Ring) Close() error {
	if r.done == nil {
		return nil
	}
	err := r.done()
	r.done, r.mem, r.data = nil, nil, nil
	return err
}
