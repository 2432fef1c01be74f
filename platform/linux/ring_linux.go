//go:build linux

package linux

import (
	"encoding/binary"

	sys "github.com/rawstack/rawstack/internal/unix"
)

// ring is one mmap'd perf ring buffer: a control page followed by a data
// area of a power-of-two size that the kernel writes and we read in place.
type ring struct {
	fd   int
	mem  []byte
	meta []byte
	data []byte
	mask uint64
	tail uint64 // our read position; only we write data_tail
}

// mapRing maps 1+pages pages of fd. pages must be a power of two.
func mapRing(fd, pages int) (*ring, error) {
	ps := sys.PageSize
	mem, err := sys.MmapShared(fd, (1+pages)*ps)
	if err != nil {
		return nil, err
	}
	r := &ring{fd: fd, mem: mem, meta: mem[:ps], data: mem[ps:]}
	if off, size := sys.RingDataOffset(r.meta); size != 0 && off+size <= uint64(len(mem)) {
		r.data = mem[off : off+size]
	}
	r.mask = uint64(len(r.data) - 1)
	return r, nil
}

// read hands every complete record between the read and write positions
// to fn, then frees their space. A record is passed in place unless it
// wraps around the end of the data area; then it is copied into scratch.
// It returns the bytes consumed.
func (r *ring) read(scratch []byte, fn func([]byte)) uint64 {
	head := sys.RingHead(r.meta)
	tail := r.tail
	start := tail
	size := uint64(len(r.data))
	for tail < head {
		off := tail & r.mask
		// Headers are 8-byte aligned and never wrap.
		n := uint64(binary.LittleEndian.Uint16(r.data[off+6:]))
		if n < 8 || tail+n > head {
			tail = head // corrupt: skip everything we were given
			break
		}
		if off+n <= size {
			fn(r.data[off : off+n])
		} else if n <= uint64(len(scratch)) {
			k := copy(scratch, r.data[off:])
			copy(scratch[k:n], r.data)
			fn(scratch[:n])
		}
		tail += n
	}
	r.tail = tail
	sys.RingSetTail(r.meta, tail)
	return tail - start
}
