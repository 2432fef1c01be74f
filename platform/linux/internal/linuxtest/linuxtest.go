//go:build linux

// Package linuxtest holds what the tests of the Linux back end's
// packages share: handlers that count or keep what a session reports,
// and a capture of raw samples of a real program for replay benchmarks.
// It imports none of those packages, so that each can use it in its own
// tests.
package linuxtest

import (
	"context"
	"encoding/binary"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
)

// CountHandler counts what a session reports.
type CountHandler struct {
	Strict  bool // panic on a kernel-flagged sample whose leaf is a user address
	mu      sync.Mutex
	Samples int
	Kernel  int
	NLost   uint64
	Modules int
	Threads int
}

func (h *CountHandler) Process(*format.Process)           {}
func (h *CountHandler) ProcessEnd(*format.ProcessEnd)     {}
func (h *CountHandler) ThreadName(*format.ThreadName)     {}
func (h *CountHandler) ThreadEnd(*format.ThreadEnd)       {}
func (h *CountHandler) ModuleUnload(*format.ModuleUnload) {}
func (h *CountHandler) ThreadStart(*format.ThreadStart) {
	h.mu.Lock()
	h.Threads++
	h.mu.Unlock()
}
func (h *CountHandler) ModuleLoad(*format.ModuleLoad) {
	h.mu.Lock()
	h.Modules++
	h.mu.Unlock()
}
func (h *CountHandler) Sample(s *platform.Sample) {
	h.mu.Lock()
	h.Samples++
	if s.Flags&format.SampleKernel != 0 {
		h.Kernel++
		if h.Strict && s.PCs[0] < 0xffff800000000000 {
			panic("kernel sample with a user leaf")
		}
	}
	h.mu.Unlock()
}
func (h *CountHandler) Lost(e *format.Lost) {
	h.mu.Lock()
	h.NLost += e.Count
	h.mu.Unlock()
}

// FrameCounter adds up the frames of the samples reported.
type FrameCounter struct {
	CountHandler
	N *int
}

func (f *FrameCounter) Sample(s *platform.Sample) { *f.N += len(s.PCs) }

// RawCapture keeps a KeepRaw session's modules and raw samples.
type RawCapture struct {
	CountHandler
	Mods []format.ModuleLoad
	Raws []platform.Sample
}

func (h *RawCapture) ModuleLoad(e *format.ModuleLoad) { h.Mods = append(h.Mods, *e) }
func (h *RawCapture) Sample(s *platform.Sample) {
	if s.Stack == nil || len(h.Raws) >= 2000 {
		return
	}
	c := *s
	c.PCs = nil
	c.Regs = append([]uint64(nil), s.Regs...)
	c.Stack = append([]byte(nil), s.Stack...)
	h.Raws = append(h.Raws, c)
}

// BuildC compiles the C source src (a path from the test's package
// directory) with cc and flags, cached by the shared fixture builder.
func BuildC(tb testing.TB, src string, flags ...string) string {
	tb.Helper()
	return testbuild.Build(tb, testbuild.Cmd{
		Tool:   "cc",
		Args:   append([]string{"-o", "{dir}/fixture", "{in0}"}, flags...),
		Inputs: []string{filepath.Clean(src)},
		Out:    "fixture",
	})
}

// Session is what CaptureRaw needs of a session.
type Session interface {
	Run(ctx context.Context) error
	Close() error
	Pid() int
}

// Launcher starts a session on a command (perf.Launch, wrapped).
type Launcher func(*exec.Cmd, platform.Config, platform.Handler) (Session, error)

// CaptureRaw records bin (a real program built without frame pointers,
// run with the argument "300000000") with KeepRaw through launch, after
// probe says sampling works, and returns its modules and raw samples,
// with each sample's registers in perf order (as PERF_SAMPLE_REGS_USER
// and the eBPF back end's records carry them), for replaying.
func CaptureRaw(b *testing.B, probe func() error, launch Launcher, bin string) (h *RawCapture, pid int, perfRegs [][]uint64) {
	if runtime.GOARCH != "amd64" {
		testbuild.Impossible(b, "amd64-only") // the records carry amd64 registers
	}
	testbuild.Feature(b, probe())
	h = &RawCapture{}
	s, err := launch(exec.Command(bin, "300000000"), platform.Config{Frequency: 2000, Unwind: platform.UnwindDWARF, KeepRaw: true}, h)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s.Run(ctx)
	cancel()
	s.Close()
	if len(h.Raws) < 50 {
		b.Fatalf("only %d raw samples captured", len(h.Raws))
	}
	for _, r := range h.Raws {
		var regs arch.Regs
		if err := regs.SetMasked(arch.AMD64, r.RegMask, r.Regs); err != nil {
			b.Fatal(err)
		}
		var vals []uint64
		for p := 0; p < 64; p++ {
			if arch.PerfRegsAMD64&(1<<uint(p)) != 0 {
				vals = append(vals, regs.R[arch.PerfToDWARF(arch.AMD64, p)])
			}
		}
		perfRegs = append(perfRegs, vals)
	}
	return h, s.Pid(), perfRegs
}

// RawHandler keeps the last sample and the lost events.
type RawHandler struct {
	CountHandler
	Last    platform.Sample
	Reasons []format.LostReason
}

func (h *RawHandler) Sample(s *platform.Sample) {
	h.Samples++
	h.Last = *s
	h.Last.PCs = append([]uint64(nil), s.PCs...)
}
func (h *RawHandler) Lost(e *format.Lost) {
	h.NLost += e.Count
	h.Reasons = append(h.Reasons, e.Reason)
}

// SampleRecord lays out a sample record as the eBPF back end's programs
// and the allocation sampler write it (platform/linux/tracking's
// samplerec_linux.go): the header, the architecture's registers
// (tracking.SampleNRegs, flagged present when regs is not nil), the
// kernel and user frames and the stack copy.
func SampleRecord(kind uint32, pid, tid uint32, t, weight uint64, kernel, user []uint64, regs []uint64, stack []byte) []byte {
	const hdr = 48
	kernelOff := hdr + 8*sampleNRegs
	b := make([]byte, kernelOff+8*(len(kernel)+len(user))+len(stack))
	le := binary.LittleEndian
	le.PutUint32(b, kind)
	le.PutUint32(b[4:], pid)
	le.PutUint32(b[8:], tid)
	le.PutUint64(b[16:], t)
	le.PutUint64(b[24:], weight)
	le.PutUint16(b[32:], uint16(len(kernel)))
	le.PutUint16(b[34:], uint16(len(user)))
	if regs != nil {
		le.PutUint16(b[36:], 1) // the registers and stack are there
		for i, r := range regs {
			le.PutUint64(b[hdr+8*i:], r)
		}
	}
	le.PutUint32(b[40:], uint32(len(stack)))
	off := kernelOff
	for _, pc := range append(append([]uint64(nil), kernel...), user...) {
		le.PutUint64(b[off:], pc)
		off += 8
	}
	copy(b[off:], stack)
	return b
}

// sampleNRegs is tracking.SampleNRegs (which this package cannot import:
// package tracking's tests import it).
var sampleNRegs = map[string]int{"amd64": 17, "arm64": 33}[runtime.GOARCH]

// SampleHeader lays out a header-only sample record: an allocation's
// block or the free of one (weight: the block), or the eBPF back end's
// return of a thread to the CPU.
func SampleHeader(kind uint32, pid, tid uint32, t, weight uint64) []byte {
	b := make([]byte, 48)
	le := binary.LittleEndian
	le.PutUint32(b, kind)
	le.PutUint32(b[4:], pid)
	le.PutUint32(b[8:], tid)
	le.PutUint64(b[16:], t)
	le.PutUint64(b[24:], weight)
	return b
}

// RingWriter writes records into the memory of an allocation sampler's
// shared ring (package allocshim's layout: a 4 KiB header, then the
// records, each after an 8-byte prefix) as the sampler does, with one
// writer and no lock: the test is the only one.
type RingWriter struct{ Mem []byte }

// Put writes rec and reports whether it fitted.
func (w RingWriter) Put(rec []byte) bool {
	const header, offHead, offTail = 4096, 128, 192
	le := binary.LittleEndian
	size := uint64(len(w.Mem) - header)
	head, tail := le.Uint64(w.Mem[offHead:]), le.Uint64(w.Mem[offTail:])
	need := uint64(len(rec)) + 8
	off := head & (size - 1)
	if off+need > size {
		pad := size - off
		if head+pad+need-tail > size {
			return false
		}
		le.PutUint32(w.Mem[header+off:], uint32(pad))
		le.PutUint32(w.Mem[header+off+4:], 1)
		head += pad
		off = 0
	}
	if head+need-tail > size {
		return false
	}
	le.PutUint32(w.Mem[header+off:], uint32(need))
	le.PutUint32(w.Mem[header+off+4:], 0)
	copy(w.Mem[header+off+8:], rec)
	le.PutUint64(w.Mem[offHead:], head+need)
	return true
}
