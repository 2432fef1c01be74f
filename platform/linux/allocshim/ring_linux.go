package allocshim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform/linux/procfs"
)

// CreateRing creates a ring of bytes record bytes (a power of two) for
// allocations that copy up to stackBytes of stack, with flags (RingWait),
// in a file of dir ("": Install's directory; no other user may write to
// it) that only this user can open (see [Ring.Chown]), and maps it. The
// file is named after this process; rings left by recorders that no
// longer run are removed first. Close unmaps and removes it. The ring is
// stamped now (Stamp): its reader stamps it at every read.
func CreateRing(dir string, bytes, stackBytes int, flags uint32) (*Ring, error) {
	if dir == "" {
		var err error
		if dir, err = installDir(); err != nil {
			return nil, err
		}
	} else if err := private(dir); err != nil {
		return nil, fmt.Errorf("allocation ring: %w", err)
	}
	removeStaleRings(dir)
	f, err := os.CreateTemp(dir, "alloc-ring-"+strconv.Itoa(os.Getpid())+"-*")
	if err != nil {
		return nil, fmt.Errorf("allocation ring: %w", err)
	}
	path := f.Name()
	defer f.Close()
	size := RingHeader + bytes
	if err := f.Truncate(int64(size)); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("allocation ring %s: %w", path, err)
	}
	// Populated: the pages exist before the sampler writes them, so
	// that a process's first samples do not each take a fault that
	// allocates and zeroes one (2,048 of them, 3 µs each, were a few
	// percent of a 0.2 s program with an 8 MiB ring).
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("allocation ring %s: mmap: %w", path, err)
	}
	done := func() error {
		err := syscall.Munmap(mem)
		if rerr := os.Remove(path); err == nil {
			err = rerr
		}
		return err
	}
	r, err := newRing(mem, stackBytes, PidNamespace(0), flags, path, done)
	if err != nil {
		done()
		return nil, err
	}
	r.Stamp(sys.Monotonic())
	return r, nil
}

// Chown gives the ring's file to uid (and gid), so that a target run as
// another user can open it (the recorder runs as root).
func (r *Ring) Chown(uid, gid int) error {
	if err := os.Chown(r.path, uid, gid); err != nil {
		return fmt.Errorf("allocation ring: %w", err)
	}
	return nil
}

// removeStaleRings removes the ring files in dir whose recorder (the pid
// in the name) no longer runs: a recorder that was killed leaves its
// ring behind.
func removeStaleRings(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "alloc-ring-")
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// PidNamespace returns the inode of the pid namespace of process pid
// (0: this process), read from /proc/PID/ns/pid ("pid:[4026531836]"),
// or 0 if it cannot be read.
func PidNamespace(pid int) uint64 {
	dir := "/proc/self"
	if pid != 0 {
		dir = procfs.Dir(pid)
	}
	l, err := os.Readlink(dir + "/ns/pid")
	if err != nil {
		return 0
	}
	l = strings.TrimSuffix(strings.TrimPrefix(l, "pid:["), "]")
	v, err := strconv.ParseUint(l, 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// SetWriterPidNS says which pid namespace (its inode) the processes
// that write the ring's records are in, before any maps it: the pids
// and thread ids they write are that namespace's, which the recorder
// translates. A sampler in another namespace writes nothing into the
// ring (its markers serve). By default it is the recorder's.
func (r *Ring) SetWriterPidNS(ns uint64) {
	binary.LittleEndian.PutUint64(r.mem[offPidNS:], ns)
}

// WriterPidNS returns the pid namespace of the ring's writers.
func (r *Ring) WriterPidNS() uint64 { return binary.LittleEndian.Uint64(r.mem[offPidNS:]) }
