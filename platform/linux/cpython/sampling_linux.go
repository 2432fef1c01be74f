//go:build linux

package cpython

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/procmaps"
	sys "github.com/rawstack/rawstack/internal/unix"
)

// Sampling is a session's Python frame reading: it finds the interpreter
// in the modules a process maps and reads each sample's frames.
type Sampling struct {
	r     *Reader
	iov   [2]sys.RemoteIovec // read2's
	mem   sys.RangeReader
	files map[string]fileResult
	errs  []error
	// nsPid: per process, whether it is in another pid namespace than
	// the recorder; nsTids: a thread's id in its process's namespace.
	nsPid  map[uint32]bool
	nsTids map[uint64]uint32
	selfNS string
}

type fileResult struct {
	in  *Interp
	err error
}

// NewSampling returns a Sampling that reads with process_vm_readv.
func NewSampling() *Sampling {
	s := &Sampling{files: map[string]fileResult{}, nsPid: map[uint32]bool{}, nsTids: map[uint64]uint32{}}
	s.selfNS, _ = os.Readlink("/proc/self/ns/pid")
	s.r = NewReader(s.read, s.read2)
	s.r.NSTid = s.nsTid
	return s
}

// read reads the target's memory with process_vm_readv: a bad address
// fails the call instead of faulting.
func (s *Sampling) read(pid uint32, addr uint64, buf []byte) bool { return s.mem.Read(pid, addr, buf) }

// read2 reads two ranges with one process_vm_readv.
func (s *Sampling) read2(pid uint32, a1 uint64, n1 int, a2 uint64, n2 int, buf []byte) int {
	s.iov[0] = sys.RemoteIovec{Base: uintptr(a1), Len: n1}
	k := 1
	if n2 > 0 {
		s.iov[1] = sys.RemoteIovec{Base: uintptr(a2), Len: n2}
		k = 2
	}
	n, err := sys.ProcessVMRead(int(pid), buf[:n1+n2], s.iov[:k])
	if err != nil {
		return 0
	}
	return n
}

// ModuleLoaded looks for an interpreter in the executable mapping
// [start, …) at file offset off of path in process pid, and attaches the
// process to it when there is one. Only files named like python or
// libpython are opened.
func (s *Sampling) ModuleLoaded(pid uint32, path string, start, off uint64) {
	if s.r.Attached(pid) || !MaybePython(path) {
		return
	}
	fr, ok := s.files[path]
	if !ok {
		fr = s.open(pid, path)
		s.files[path] = fr
		if fr.err != nil && !errors.Is(fr.err, errNotPython) && len(s.errs) < 8 {
			s.errs = append(s.errs, fr.err)
		}
	}
	if fr.in == nil {
		return
	}
	if bias, ok := fr.in.Bias(start, off); ok {
		s.r.Attach(pid, fr.in, bias)
	}
}

func (s *Sampling) open(pid uint32, path string) fileResult {
	in, err := Load("/proc/"+strconv.FormatUint(uint64(pid), 10)+"/root"+path, path)
	if err != nil && !errors.Is(err, ErrUnknownVersion) && !errors.Is(err, errNotPython) {
		in, err = Load(path, path)
	}
	return fileResult{in: in, err: err}
}

// WaitingGIL reports whether a thread of pid whose native stack is pcs is
// blocked taking the GIL (see [Reader.WaitingGIL]).
func (s *Sampling) WaitingGIL(pid uint32, pcs []uint64) bool { return s.r.WaitingGIL(pid, pcs) }

// Frames returns the Python frames of a sample of tid in pid at time t
// and the code objects seen for the first time (see [Reader.Frames]).
func (s *Sampling) Frames(pid, tid uint32, t int64) ([]format.PyFrame, []format.PyCode) {
	return s.r.Frames(pid, tid, t)
}

// SetOnThread sets a function told of each thread state found (see
// [Reader.SetOnThread]).
func (s *Sampling) SetOnThread(f func(pid, tid uint32, tstate, gil uint64)) { s.r.SetOnThread(f) }

// SetOnProcess sets a function told of each process attached (see
// [Reader.SetOnProcess]).
func (s *Sampling) SetOnProcess(f func(pid uint32, w Walk)) { s.r.SetOnProcess(f) }

// FramesRaw returns the Python frames a sampler read at the sample (see
// [Reader.FramesRaw]).
func (s *Sampling) FramesRaw(pid uint32, raw []uint64, cut, held bool) ([]format.PyFrame, []format.PyCode) {
	return s.r.FramesRaw(pid, raw, cut, held)
}

// ClearGIL forgets the GIL hold of the last Frames call (its frames were
// not used).
func (s *Sampling) ClearGIL() { s.r.GIL = format.PyGILNone }

// GIL returns the hold on the GIL of the thread of the last Frames call
// (see [Reader.GIL]).
func (s *Sampling) GIL() format.PyGIL { return s.r.GIL }

// Forget drops what is known of process pid (it exited or exec'd).
func (s *Sampling) Forget(pid uint32) {
	s.r.Forget(pid)
	delete(s.nsPid, pid) // a reused pid may be of another namespace
}

// Stats returns the running counts.
func (s *Sampling) Stats() Stats { return s.r.Stats }

// Cut returns how many chains were cut, for every reason.
func (s *Sampling) Cut() uint64 {
	var n uint64
	for _, c := range s.r.Stats.Cut {
		n += c
	}
	return n
}

// Errors returns the interpreters found but not read (unknown versions),
// one per file.
func (s *Sampling) Errors() []error { return s.errs }

// AttachMaps looks for an interpreter in the executable mappings of
// process pid now (/proc/PID/maps): for a process attached to after it
// started, or a snapshot. It reports whether pid has one.
func (s *Sampling) AttachMaps(pid uint32) bool {
	ok := procmaps.ExecFiles(pid, func(m *procmaps.Mapping) { s.ModuleLoaded(pid, m.Path, m.Start, m.Offset) })
	return ok && s.r.Attached(pid)
}

// nsTid returns the id thread tid of process pid has in the process's
// own pid namespace (the last of /proc/PID/task/TID/status's NSpid), the
// one a container's interpreter records in its thread states; tid for a
// process in the recorder's namespace.
func (s *Sampling) nsTid(pid, tid uint32) uint32 {
	other, ok := s.nsPid[pid]
	if !ok {
		ns, err := os.Readlink("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/ns/pid")
		other = err == nil && s.selfNS != "" && ns != s.selfNS
		if len(s.nsPid) > 4096 {
			clear(s.nsPid)
		}
		s.nsPid[pid] = other
	}
	if !other {
		return tid
	}
	key := uint64(pid)<<32 | uint64(tid)
	if v, ok := s.nsTids[key]; ok {
		return v
	}
	v := tid
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/task/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if n, err := strconv.ParseUint(f[len(f)-1], 10, 32); err == nil {
						v = uint32(n)
					}
				}
				break
			}
		}
	}
	if len(s.nsTids) > 1<<16 {
		clear(s.nsTids)
	}
	s.nsTids[key] = v
	return v
}
