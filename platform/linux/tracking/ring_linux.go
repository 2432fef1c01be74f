//go:build linux

package tracking

import (
	"encoding/binary"

	sys "github.com/rawstack/rawstack/internal/unix"
)

// Ring is one mmap'd perf ring buffer: a control page followed by a data
// area of a power-of-two size that the kernel writes and we read in place.
type Ring struct {
	fd   int
	mem  []byte
	meta []byte
	data []byte
	mask uint64
	tail uint64 // our read position; only we write data_tail

	head, start uint64 // snapshot of data_head, and tail at begin
	scratch     []byte // a record that wraps, reassembled
	Pending     []byte // record returned by Next but not yet handled
	PendingTime uint64 // its time, for merging rings
}

// MapRing maps 1+pages pages of fd. pages must be a power of two.
func MapRing(fd, pages int) (*Ring, error) {
	ps := sys.PageSize
	mem, err := sys.MmapShared(fd, (1+pages)*ps)
	if err != nil {
		return nil, err
	}
	r := &Ring{fd: fd, mem: mem, meta: mem[:ps], data: mem[ps:]}
	if off, size := sys.RingDataOffset(r.meta); size != 0 && off+size <= uint64(len(mem)) {
		r.data = mem[off : off+size]
	}
	r.mask = uint64(len(r.data) - 1)
	return r, nil
}

// A ring is read in three steps so that several rings can be merged in
// time order: begin snapshots the write position, next returns the
// following record (in place, or copied into the ring's scratch buffer
// when it wraps around the end of the data area), and commit frees what
// was consumed.

// begin snapshots the kernel's write position.
func (r *Ring) Begin() {
	r.head = sys.RingHead(r.meta)
	r.start = r.tail
}

// next returns the next complete record, or nil when there is none.
func (r *Ring) Next() []byte {
	for r.tail < r.head {
		off := r.tail & r.mask
		// Headers are 8-byte aligned and never wrap.
		n := uint64(binary.LittleEndian.Uint16(r.data[off+6:]))
		if n < 8 || r.tail+n > r.head {
			r.tail = r.head // corrupt: skip everything we were given
			return nil
		}
		r.tail += n
		if off+n <= uint64(len(r.data)) {
			return r.data[off : off+n]
		}
		if cap(r.scratch) < int(n) {
			r.scratch = make([]byte, 0, 64<<10)
		}
		b := r.scratch[:n]
		k := copy(b, r.data[off:])
		copy(b[k:], r.data)
		return b
	}
	return nil
}

// commit frees the consumed records and returns their size in bytes.
func (r *Ring) Commit() uint64 {
	sys.RingSetTail(r.meta, r.tail)
	return r.tail - r.start
}

// read hands every record now in the ring to fn and frees them.
func (r *Ring) read(fn func([]byte)) uint64 {
	r.Begin()
	for b := r.Next(); b != nil; b = r.Next() {
		fn(b)
	}
	return r.Commit()
}

// FD is the perf event whose ring this is.
func (r *Ring) FD() int { return r.fd }
