//go:build linux

package tracking_test

import (
	"encoding/binary"
	"os/exec"
	"testing"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/internal/linuxtest"
	"github.com/rawstack/rawstack/platform/linux/perf"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// BenchmarkDWARFUnwind measures online unwinding per sample (decode,
// unwind through the fixture's chain and libc, report) on samples of a
// real program built without frame pointers, replayed with its mappings.
func BenchmarkDWARFUnwind(b *testing.B) {
	h, pid, perfRegs := linuxtest.CaptureRaw(b, perf.Probe, launchPerf, linuxtest.BuildC(b, "testdata/fpchain.c", "-O2", "-fomit-frame-pointer"))
	// Rebuild perf records: registers back in perf order, stack copy, a
	// time that is never late.
	var recs [][]byte
	for i, r := range h.Raws {
		rec := tracking.DwarfSampleRecord(nil, 2, perfRegs[i], r.Stack, uint64(len(r.Stack)+7)&^7, uint64(len(r.Stack)))
		binary.LittleEndian.PutUint32(rec[8+8:], r.Pid)
		binary.LittleEndian.PutUint64(rec[8+16:], 1<<62)
		recs = append(recs, rec)
	}
	count := &linuxtest.CountHandler{}
	rs := tracking.New(platform.Config{Pid: pid, Unwind: platform.UnwindDWARF}, count)
	rs.SetTarget(pid, false)
	for i := range h.Mods {
		m := &h.Mods[i]
		rs.LoadModule(m.Time, m.Pid, m.Base, m.Base+m.Size, m.FileOffset, 0, 0, m.Path, m.BuildID)
	}
	for _, rec := range recs { // warm: tables built
		rs.Replay(rec)
	}
	frames := 0
	rs.SetHandler(&linuxtest.FrameCounter{N: &frames})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rs.Replay(recs[i%len(recs)])
	}
	b.ReportMetric(float64(frames)/float64(b.N), "frames/sample")
}

// launchPerf is perf.Launch for linuxtest.CaptureRaw.
func launchPerf(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (linuxtest.Session, error) {
	s, err := perf.Launch(cmd, cfg, h)
	if err != nil {
		return nil, err
	}
	return s, nil
}
