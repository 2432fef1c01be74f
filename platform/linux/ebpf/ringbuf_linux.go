//go:build linux && (amd64 || arm64)

package ebpf

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	sys "github.com/rawstack/rawstack/internal/unix"
)

// ringReader reads the BPF ring buffer in place. cilium/ebpf's
// ringbuf.Reader copies each record out (8 KiB of stack per sample: 13%
// of a whole-host off-CPU recording's CPU went to that memmove); here a
// record is a slice of the mapped ring, valid until the next call, when
// the consumer position moves past it. The layout is the kernel's
// (kernel/bpf/ringbuf.c): a consumer page the reader writes, then the
// producer page and the data pages mapped twice in a row, so that a
// record that wraps is contiguous; each record is an 8-byte header (length
// with a busy and a discard bit, page offset) and its data, 8-byte
// aligned.
type ringReader struct {
	cons []byte // consumer page: the consumer position, ours to write
	prod []byte // producer page, then the data twice
	data []byte
	mask uint64

	release uint64 // the consumer position past the record returned last
	held    bool
}

const (
	ringBusy    = 1 << 31
	ringDiscard = 1 << 30
	ringHdr     = 8
)

func newRingReader(fd, size int) (*ringReader, error) {
	if size <= 0 || size&(size-1) != 0 {
		return nil, fmt.Errorf("BPF ring buffer of %d bytes: not a power of two", size)
	}
	page := os.Getpagesize()
	cons, err := sys.MmapShared(fd, page)
	if err != nil {
		return nil, fmt.Errorf("mapping the BPF ring buffer's consumer page: %w", err)
	}
	prod, err := sys.MmapRead(fd, int64(page), page+2*size)
	if err != nil {
		sys.Munmap(cons)
		return nil, fmt.Errorf("mapping the BPF ring buffer (%d bytes): %w", size, err)
	}
	return &ringReader{cons: cons, prod: prod, data: prod[page:], mask: uint64(size - 1)}, nil
}

func (r *ringReader) consPos() *uint64 { return (*uint64)(unsafe.Pointer(&r.cons[0])) }
func (r *ringReader) prodPos() *uint64 { return (*uint64)(unsafe.Pointer(&r.prod[0])) }

// next releases the record returned last and returns the next committed
// one, or false when there is none now (or the next is still being
// written: it is read on a later call).
func (r *ringReader) next() ([]byte, bool) {
	if r.held {
		atomic.StoreUint64(r.consPos(), r.release)
		r.held = false
	}
	for {
		cons := atomic.LoadUint64(r.consPos())
		prod := atomic.LoadUint64(r.prodPos())
		if prod-cons < ringHdr {
			return nil, false
		}
		off := cons & r.mask
		// The length is written last (an atomic exchange that clears the
		// busy bit), after the data.
		hdr := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[off])))
		if hdr&ringBusy != 0 {
			return nil, false
		}
		n := uint64(hdr &^ (ringBusy | ringDiscard))
		end := cons + ringHdr + (n+7)&^7
		if n > r.mask+1-ringHdr || end > prod {
			// Not a record the kernel writes: skip what is there rather
			// than read past the ring.
			atomic.StoreUint64(r.consPos(), prod)
			return nil, false
		}
		if hdr&ringDiscard != 0 {
			atomic.StoreUint64(r.consPos(), end)
			continue
		}
		r.release, r.held = end, true
		return r.data[off+ringHdr : off+ringHdr+n : off+ringHdr+n], true
	}
}

func (r *ringReader) close() {
	if r.prod != nil {
		sys.Munmap(r.prod)
		sys.Munmap(r.cons)
		r.prod, r.cons = nil, nil
	}
}
