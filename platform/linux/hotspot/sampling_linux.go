//go:build linux

package hotspot

import (
	"debug/elf"
	"errors"
	"fmt"
	"runtime"
	"strconv"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/procmaps"
	sys "github.com/rawstack/rawstack/internal/unix"
)

// Sampling is a session's Java frame naming: it finds libjvm in the
// modules a process maps and names each sample's frames.
type Sampling struct {
	r       *Reader
	mem     sys.RangeReader
	files   map[string]fileResult
	layouts map[string]*Layout // by libjvm path, once read from a process
	errs    []error
	warned  map[string]bool
	failed  map[string]bool // libjvms whose tables were read and refused
}

type fileResult struct {
	syms Symbols // relative to the load bias
	f    *elf.File
	err  error
}

// NewSampling returns a Sampling that reads with process_vm_readv.
func NewSampling() *Sampling {
	s := &Sampling{files: map[string]fileResult{}, layouts: map[string]*Layout{}, warned: map[string]bool{}, failed: map[string]bool{}}
	s.r = NewReader(s.read)
	return s
}

func (s *Sampling) read(pid uint32, addr uint64, buf []byte) bool { return s.mem.Read(pid, addr, buf) }

// Batch tells the Sampling that the samples read from now until the
// next Batch were read from their ring at one time: an object of the
// target read for one of them is not read again for the next. A Sampling
// whose Batch is never called (a snapshot) reads the target every time.
func (s *Sampling) Batch() { s.mem.Batch() }

// ModuleLoaded attaches process pid to the libjvm whose executable
// mapping [start, end) of path it maps (other files are ignored). The
// VM's tables are read at the process's first sample, once it has filled
// them.
func (s *Sampling) ModuleLoaded(pid uint32, path string, start, end uint64) {
	if !IsLibJVM(path) {
		return
	}
	if runtime.GOARCH != "amd64" {
		// The walk knows x86-64's frames (a leaf's return address on the
		// stack, the interpreter's slots): elsewhere, no guess.
		s.warn(path, fmt.Errorf("hotspot: %s: Java frames are read on x86-64 only, not %s: %w", path, runtime.GOARCH, ErrUnknownVersion))
		return
	}
	fr, ok := s.files[path]
	if !ok {
		fr = s.open(pid, path)
		s.files[path] = fr
		if fr.err != nil {
			s.warn(path, fr.err)
		}
	}
	if fr.err != nil || s.failed[path] {
		return
	}
	bias, ok := TextBias(fr.f, start)
	if !ok {
		return
	}
	s.r.Attach(pid, path, fr.syms.Rebase(bias), s.layouts[path])
}

func (s *Sampling) warn(path string, err error) {
	if !s.warned[path] && len(s.errs) < 8 {
		s.warned[path] = true
		s.errs = append(s.errs, err)
	}
}

func (s *Sampling) open(pid uint32, path string) fileResult {
	f, err := elf.Open("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/root" + path)
	if err != nil {
		f, err = elf.Open(path)
	}
	if err != nil {
		return fileResult{err: fmt.Errorf("hotspot: %w", err)}
	}
	syms, err := FileSymbols(f, path)
	f.Close() // only the headers, read already, are used later
	return fileResult{syms: syms, f: f, err: err}
}

// Attached reports whether pid runs HotSpot.
func (s *Sampling) Attached(pid uint32) bool { return s.r.Attached(pid) }

// Any reports whether some process runs HotSpot.
func (s *Sampling) Any() bool { return s.r.Any() }

// Frames returns the Java frames of a sample of pid (see [Reader.Frames]).
func (s *Sampling) Frames(pid uint32, regs Regs, st Stack, pcs []uint64) ([]format.JITFrame, []format.JITFunc, []uint64) {
	fs, fresh, walk := s.r.Frames(pid, regs, st, pcs)
	if p := s.r.procs[pid]; p != nil {
		if p.layout != nil && s.layouts[p.path] == nil {
			s.layouts[p.path] = p.layout
		}
		if p.err != nil && !errors.Is(p.err, errNotReady) {
			// Other processes of this libjvm would fail alike.
			s.failed[p.path] = true
			s.warn(p.path, fmt.Errorf("%s: %w", p.path, p.err))
		}
	}
	return fs, fresh, walk
}

// Forget drops what is known of process pid.
func (s *Sampling) Forget(pid uint32) { s.r.Forget(pid) }

// Stats returns the running counts.
func (s *Sampling) Stats() Stats { return s.r.Stats }

// Errors returns the libjvm builds found but not read, one per file.
func (s *Sampling) Errors() []error { return s.errs }

// AttachMaps looks for libjvm in the executable mappings of process pid
// now (/proc/PID/maps), for a process attached to after it started or a
// snapshot, and reports whether pid runs it.
func (s *Sampling) AttachMaps(pid uint32) bool {
	ok := procmaps.ExecFiles(pid, func(m *procmaps.Mapping) { s.ModuleLoaded(pid, m.Path, m.Start, m.End) })
	return ok && s.r.Attached(pid)
}
