//go:build linux

package tracking

import (
	"errors"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/hotspot"
)

// javaFrames names the Java frames of the samples of JVMs (HotSpot) from
// the VM's own serviceability tables (platform/linux/hotspot): on by
// default, off with Config.NoJIT. Like jsFrames it needs the sample's
// registers and stack copy. Compiled Java code keeps no frame pointers,
// so the session's native stack stops at it; the walk's own native stack
// replaces it from there.
type javaFrames struct {
	hs   *hotspot.Sampling
	nerr int
	pcs  []uint64
}

func (j *javaFrames) init(cfg platform.Config) {
	if !cfg.NoJIT {
		j.hs = hotspot.NewSampling()
	}
}

// loaded tells the reader of an executable mapping of a file; it returns
// the reader's warnings when they grew.
func (j *javaFrames) loaded(pid uint32, path string, start, end uint64) (string, bool) {
	if j.hs == nil {
		return "", false
	}
	j.hs.ModuleLoaded(pid, path, start, end)
	return j.warning()
}

func (j *javaFrames) warning() (string, bool) {
	if errs := j.hs.Errors(); len(errs) > j.nerr {
		j.nerr = len(errs)
		return errors.Join(errs...).Error(), true
	}
	return "", false
}

func (j *javaFrames) forget(pid uint32) {
	if j.hs != nil {
		j.hs.Forget(pid)
	}
}

// frames returns the Java frames of sample sm of pid, whose registers
// and stack copy were regs and st, and puts the walk's native stack in
// sm.PCs (after its kernel frames) when it reaches further than the
// session's.
func (j *javaFrames) frames(pid uint32, regs hotspot.Regs, st hotspot.Stack, sm *platform.Sample) ([]format.JITFrame, []format.JITFunc) {
	pcs := sm.PCs
	if sm.Stack != nil { // --keep-raw: not unwound; the walk follows frame pointers
		pcs = nil
	}
	fs, fresh, walk := j.hs.Frames(pid, regs, st, pcs)
	if len(fs) > 0 && sm.Stack == nil {
		k := 0
		for k < len(sm.PCs) && sm.PCs[k] >= kernelAddr {
			k++
		}
		if len(walk) > len(sm.PCs)-k {
			j.pcs = append(append(j.pcs[:0], sm.PCs[:k]...), walk...)
			sm.PCs = j.pcs
		}
	}
	return fs, fresh
}

// kernelAddr is where x86-64 kernel addresses begin.
const kernelAddr = 0xffff800000000000
