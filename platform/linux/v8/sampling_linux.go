//go:build linux

package v8

import (
	"errors"
	"os"
	"strconv"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/procmaps"
	sys "github.com/rawstack/rawstack/internal/unix"
)

// Sampling is a session's JavaScript frame naming: it finds V8 in the
// modules a process maps and names each sample's frames.
type Sampling struct {
	r     *Reader
	mem   sys.RangeReader
	files map[string]fileResult
	errs  []error
	// Anon reports whether pc of pid lies in anonymous executable memory
	// (set by the session, which tracks the mappings).
	Anon func(pid uint32, pc uint64) bool
}

type fileResult struct {
	l   *Layout
	err error
}

// NewSampling returns a Sampling that reads with process_vm_readv.
func NewSampling() *Sampling {
	s := &Sampling{files: map[string]fileResult{}}
	s.r = NewReader(s.read)
	return s
}

func (s *Sampling) read(pid uint32, addr uint64, buf []byte) bool { return s.mem.Read(pid, addr, buf) }

// Batch tells the Sampling that the samples read from now until the
// next Batch were read from their ring at one time: an object of the
// target read for one of them is not read again for the next. A Sampling
// whose Batch is never called (a snapshot) reads the target every time.
func (s *Sampling) Batch() { s.mem.Batch() }

// ModuleLoaded looks for V8 in the executable mapping [start, end) of
// path in process pid (only files named like node are opened) and
// attaches the process to it when there is one.
func (s *Sampling) ModuleLoaded(pid uint32, path string, start, end uint64) {
	if !MaybeV8(path) {
		return
	}
	fr, ok := s.files[path]
	if !ok {
		fr = s.open(pid, path)
		s.files[path] = fr
		if fr.err != nil && !IsNotV8(fr.err) && len(s.errs) < 8 {
			s.errs = append(s.errs, fr.err)
		}
	}
	if fr.l == nil {
		return
	}
	if !s.r.Attached(pid) {
		anon := s.Anon
		s.r.Attach(pid, fr.l, func(pc uint64) bool { return anon != nil && anon(pid, pc) })
	}
	s.r.AddText(pid, start, end)
}

func (s *Sampling) open(pid uint32, path string) fileResult {
	l, err := Load("/proc/"+strconv.FormatUint(uint64(pid), 10)+"/root"+path, path)
	if err != nil && !errors.Is(err, ErrUnknownVersion) && !IsNotV8(err) {
		l, err = Load(path, path)
	}
	return fileResult{l: l, err: err}
}

// Attached reports whether pid runs V8.
func (s *Sampling) Attached(pid uint32) bool { return s.r.Attached(pid) }

// Any reports whether some process runs V8.
func (s *Sampling) Any() bool { return s.r.Any() }

// Frames returns the JavaScript frames of a sample of pid (see
// [Reader.Frames]).
func (s *Sampling) Frames(pid uint32, regs Regs, st Stack, pcs []uint64) ([]format.JITFrame, []format.JITFunc) {
	return s.r.Frames(pid, regs, st, pcs)
}

// Forget drops what is known of process pid.
func (s *Sampling) Forget(pid uint32) { s.r.Forget(pid) }

// Stats returns the running counts.
func (s *Sampling) Stats() Stats { return s.r.Stats }

// Errors returns the V8 builds found but not read, one per file.
func (s *Sampling) Errors() []error { return s.errs }

// AttachMaps looks for V8 in the executable mappings of process pid now
// (/proc/PID/maps), for a process attached to after it started or a
// snapshot, and reports whether pid runs it. Without a session's Anon,
// the anonymous executable mappings read here are used.
func (s *Sampling) AttachMaps(pid uint32) bool {
	data, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/maps")
	if err != nil {
		return false
	}
	maps, _ := procmaps.Parse(data)
	var anon [][2]uint64
	for _, m := range maps {
		if !m.Exec() {
			continue
		}
		if m.Path == "" || m.Path[0] == '[' && m.Path != "[vdso]" && m.Path != "[vsyscall]" {
			anon = append(anon, [2]uint64{m.Start, m.End})
		}
	}
	if s.Anon == nil {
		s.Anon = func(p uint32, pc uint64) bool {
			if p != pid {
				return false
			}
			for _, a := range anon {
				if pc >= a[0] && pc < a[1] {
					return true
				}
			}
			return false
		}
	}
	for _, m := range maps {
		if m.Exec() && m.Path != "" {
			s.ModuleLoaded(pid, m.Path, m.Start, m.End)
		}
	}
	return s.r.Attached(pid)
}
