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
