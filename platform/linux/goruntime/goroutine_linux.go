//go:build linux

package goruntime

import (
	"math/bits"
	"runtime"
	"strconv"

	"github.com/rawstack/rawstack/format"
	sys "github.com/rawstack/rawstack/internal/unix"
)

// Sampling is a session's goroutine reading: the perf registers it
// needs (in frame-pointer mode only these two are sampled, 16 bytes and
// the 8-byte ABI word per sample) and where they sit in a sample's user
// registers.
type Sampling struct {
	gr         *goReader
	gReg, sReg int    // perf numbers of the g register and the stack pointer
	Mask       uint64 // those two
	gIdx, sIdx int    // their index in the record's user registers
	iov        [1]sys.RemoteIovec
}

// NewSampling returns a goroutine reader for the registers of this
// architecture (amd64, arm64), or nil elsewhere.
func NewSampling() *Sampling {
	gs := &Sampling{}
	g, sp, ok := Regs()
	if !ok {
		return nil
	}
	gs.gReg, gs.sReg, gs.Mask = g, sp, 1<<g|1<<sp
	gs.gr = newGoReader(gs.read, exePath)
	return gs
}

// Regs returns the perf numbers of the g register and the stack pointer
// of this architecture (amd64, arm64); ok false elsewhere.
func Regs() (g, sp int, ok bool) {
	switch runtime.GOARCH {
	case "amd64":
		return perfRegAMD64R14, perfRegAMD64SP, true
	case "arm64":
		return perfRegARM64X28, perfRegARM64SP, true
	}
	return 0, 0, false
}

// Place computes where the g register and the stack pointer are among
// the registers of mask (ascending perf numbers).
func (gs *Sampling) Place(mask uint64) {
	gs.gIdx = bits.OnesCount64(mask & (1<<gs.gReg - 1))
	gs.sIdx = bits.OnesCount64(mask & (1<<gs.sReg - 1))
}

// read reads the target's memory with process_vm_readv: a bad address
// fails the call instead of faulting, in the calling process too.
func (gs *Sampling) read(pid uint32, addr uint64, buf []byte) bool {
	gs.iov[0] = sys.RemoteIovec{Base: uintptr(addr), Len: len(buf)}
	n, err := sys.ProcessVMRead(int(pid), buf, gs.iov[:])
	return err == nil && n == len(buf)
}

func exePath(pid uint32) string { return "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/exe" }

// Goroutine returns the goroutine that was running in a sample of pid
// whose user registers are regs (as placed by [Sampling.Place]), its label
// set and the labels seen for the first time; 0s when regs lacks them or
// the target's memory could not be read.
func (gs *Sampling) Goroutine(pid uint32, regs []uint64) (goid, set uint64, fresh []format.Label) {
	if len(regs) <= max(gs.gIdx, gs.sIdx) {
		return 0, 0, nil
	}
	return gs.gr.goroutine(pid, regs[gs.gIdx], regs[gs.sIdx])
}

// Warning names a Go program sampled whose goroutines were not read (its
// executable has no DWARF: built -ldflags=-w, or stripped), "" for none.
// The calling process needs none.
func (gs *Sampling) Warning() string { return gs.gr.warning }

// Forget drops what is known of process pid (it exited or exec'd).
func (gs *Sampling) Forget(pid uint32) { gs.gr.forget(pid) }
