//go:build linux

package tracking

import (
	"errors"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/hotspot"
	v8 "github.com/rawstack/rawstack/platform/linux/v8"
)

// jsFrames names the JavaScript frames of the samples of V8 processes
// (Node.js) from V8's own metadata (platform/linux/v8): on by default,
// off with Config.NoJIT. It needs the sample's registers and stack copy
// (every mode but --unwind fp): V8's frames are found by their frame
// pointers in the copy, which is the stack as it was at the sample.
type jsFrames struct {
	s    *Tracker
	v8   *v8.Sampling
	java javaFrames // HotSpot's frames (hotspot_linux.go)
	a    arch.Arch
	regs arch.Regs
	nerr int
}

func (j *jsFrames) init(s *Tracker, cfg platform.Config) {
	if cfg.NoJIT || s.uw == nil {
		return
	}
	j.s, j.v8, j.a = s, v8.NewSampling(), s.uw.arch
	j.v8.Anon = s.anonCode
	j.java.init(cfg)
}

// loaded tells the reader of an executable mapping of a file.
func (j *jsFrames) loaded(pid uint32, path string, start, end uint64) {
	if j.v8 == nil {
		return
	}
	was := j.v8.Attached(pid)
	j.v8.ModuleLoaded(pid, path, start, end)
	if !was && j.s.OnV8 != nil && j.v8.Attached(pid) {
		j.s.OnV8(pid)
	}
	if errs := j.v8.Errors(); len(errs) > j.nerr {
		j.nerr = len(errs)
		w := errors.Join(errs...).Error()
		j.s.jsWarning.Store(&w)
	}
	if w, ok := j.java.loaded(pid, path, start, end); ok {
		j.s.jsWarning.Store(&w)
	}
}

// batch starts a read of the rings: the runtimes' objects read for one
// sample are not read again for the next samples of this read.
func (j *jsFrames) batch() {
	if j.v8 == nil {
		return
	}
	j.v8.Batch()
	if j.java.hs != nil {
		j.java.hs.Batch()
	}
}

// any reports whether some process's frames are read from V8's or
// HotSpot's metadata.
func (j *jsFrames) any() bool {
	return j.v8 != nil && (j.v8.Any() || j.java.hs != nil && j.java.hs.Any())
}

func (j *jsFrames) forget(pid uint32) {
	if j.v8 != nil {
		j.v8.Forget(pid)
	}
	j.java.forget(pid)
}

// frames returns the JavaScript frames of sample r, whose native stack
// sm holds once unwound (with --keep-raw it is not: the frame pointers
// are followed from the registers).
func (j *jsFrames) frames(r *record, sm *platform.Sample) ([]format.JITFrame, []format.JITFunc) {
	if j.v8 == nil || r.UserABI == 0 || len(r.UserRegs) == 0 {
		return nil, nil
	}
	java := j.java.hs != nil && j.java.hs.Attached(r.Pid)
	if !java && !j.v8.Attached(r.Pid) {
		return nil, nil
	}
	if j.regs.SetPerf(j.a, j.s.uw.mask, r.UserRegs) != nil {
		return nil, nil
	}
	sp := j.regs.SP()
	if java {
		fs, fresh := j.java.frames(r.Pid, hotspot.Regs{PC: j.regs.PC(), SP: sp, FP: j.regs.FP()}, hotspot.Stack{Addr: sp, Data: r.UserStack}, sm)
		if len(fs) > 0 {
			j.s.jsSamples.Add(1)
		}
		if w, ok := j.java.warning(); ok {
			j.s.jsWarning.Store(&w)
		}
		j.storeCut()
		return fs, fresh
	}
	pcs := sm.PCs
	if sm.Stack != nil {
		pcs = nil
	}
	fs, fresh := j.v8.Frames(r.Pid, v8.Regs{PC: j.regs.PC(), SP: sp, FP: j.regs.FP()}, v8.Stack{Addr: sp, Data: r.UserStack}, pcs)
	if len(fs) > 0 {
		j.s.jsSamples.Add(1)
	}
	j.storeCut()
	return fs, fresh
}

// storeCut sums the walks both readers cut short.
func (j *jsFrames) storeCut() {
	var cut uint64
	for _, n := range j.v8.Stats().Cut {
		cut += n
	}
	if j.java.hs != nil {
		for _, n := range j.java.hs.Stats().Cut {
			cut += n
		}
	}
	j.s.jsCut.Store(cut)
}

// anonCode reports whether addr of pid lies in anonymous executable
// memory: where a JIT compiler puts its code.
func (s *Tracker) anonCode(pid uint32, addr uint64) bool {
	ps := s.procs[pid]
	if ps == nil {
		return false
	}
	for _, m := range ps.modules {
		if addr >= m.start && addr < m.end {
			return m.ml != nil && m.ml.Kind == format.ModuleAnon
		}
	}
	return false
}
