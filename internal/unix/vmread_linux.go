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
	return unix.ProcessVMReadv(pid, r.local, remote, 0)
}

// RangeReader reads one range of another process per call, reusing its
// iovec: the memory access of the runtimes' frame readers (CPython, V8,
// HotSpot).
type RangeReader struct{ iov [1]RemoteIovec }

// Read reads len(buf) bytes of process pid at addr into buf and reports
// whether all of them could be read.
func (r *RangeReader) Read(pid uint32, addr uint64, buf []byte) bool {
	r.iov[0] = RemoteIovec{Base: uintptr(addr), Len: len(buf)}
	n, err := ProcessVMRead(int(pid), buf, r.iov[:1])
	return err == nil && n == len(buf)
}
