//go:build linux

package linux

import (
	"context"
	"encoding/binary"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
)

// rawCapture keeps a KeepRaw session's modules and raw samples.
type rawCapture struct {
	countHandler
	mods []format.ModuleLoad
	raws []platform.Sample
}

func (h *rawCapture) ModuleLoad(e *format.ModuleLoad) { h.mods = append(h.mods, *e) }
func (h *rawCapture) Sample(s *platform.Sample) {
	if s.Stack == nil || len(h.raws) >= 2000 {
		return
	}
	c := *s
	c.PCs = nil
	c.Regs = append([]uint64(nil), s.Regs...)
	c.Stack = append([]byte(nil), s.Stack...)
	h.raws = append(h.raws, c)
}

// captureRaw records a real program built without frame pointers with
// KeepRaw and returns its modules and raw samples, with each sample's
// registers in perf order (as PERF_SAMPLE_REGS_USER and the eBPF back
// end's records carry them), for replaying.
func captureRaw(b *testing.B) (h *rawCapture, pid int, perfRegs [][]uint64) {
	if runtime.GOARCH != "amd64" {
		testbuild.Impossible(b, "amd64-only") // the records carry amd64 registers
	}
	testbuild.Feature(b, Probe())
	bin := buildFixture(b, "fpchain.c", "-O2", "-fomit-frame-pointer")
	h = &rawCapture{}
	s, err := Launch(exec.Command(bin, "300000000"), platform.Config{Frequency: 2000, Unwind: platform.UnwindDWARF, KeepRaw: true}, h)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s.Run(ctx)
	cancel()
	s.Close()
	if len(h.raws) < 50 {
		b.Fatalf("only %d raw samples captured", len(h.raws))
	}
	for _, r := range h.raws {
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

// BenchmarkDWARFUnwind measures online unwinding per sample (decode,
// unwind through the fixture's chain and libc, report) on samples of a
// real program built without frame pointers, replayed with its mappings.
func BenchmarkDWARFUnwind(b *testing.B) {
	h, pid, perfRegs := captureRaw(b)
	// Rebuild perf records: registers back in perf order, stack copy, a
	// time that is never late.
	var recs [][]byte
	for i, r := range h.raws {
		rec := dwarfSampleRecord(nil, 2, perfRegs[i], r.Stack, uint64(len(r.Stack)+7)&^7, uint64(len(r.Stack)))
		binary.LittleEndian.PutUint32(rec[8+8:], r.Pid)
		binary.LittleEndian.PutUint64(rec[8+16:], 1<<62)
		recs = append(recs, rec)
	}
	count := &countHandler{}
	rs := newSession(platform.Config{Pid: pid, Unwind: platform.UnwindDWARF}, count)
	rs.pid = pid
	for i := range h.mods {
		m := &h.mods[i]
		rs.loadModule(m.Time, m.Pid, m.Base, m.Base+m.Size, m.FileOffset, 0, 0, m.Path, m.BuildID)
	}
	for _, rec := range recs { // warm: tables built
		rs.Replay(rec)
	}
	frames := 0
	rs.h = &frameCounter{n: &frames}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rs.Replay(recs[i%len(recs)])
	}
	b.ReportMetric(float64(frames)/float64(b.N), "frames/sample")
}

type frameCounter struct {
	countHandler
	n *int
}

func (f *frameCounter) Sample(s *platform.Sample) { *f.n += len(s.PCs) }
