//go:build linux && (amd64 || arm64)

package ebpf

import (
	"os/exec"
	"testing"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/internal/linuxtest"
	"github.com/rawstack/rawstack/platform/linux/perf"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// BenchmarkBPFRecord measures the eBPF back end's host work per sample:
// decoding a BPF ring record (registers and an 8 KiB-capped stack copy of
// a real program built without frame pointers), unwinding it with the
// session's lazy tables once warm, and reporting it. The first touch of a
// module's table is BenchmarkLazyTableELF's (package arch).
func BenchmarkBPFRecord(b *testing.B) {
	h, pid, perfRegs := linuxtest.CaptureRaw(b, tracking.ProbePerf, launchPerf, linuxtest.BuildC(b, "../tracking/testdata/fpchain.c", "-O2", "-fomit-frame-pointer"))
	var recs [][]byte
	for i, r := range h.Raws {
		stack := r.Stack
		if len(stack) > bpfMaxStack {
			stack = stack[:bpfMaxStack]
		}
		rec := linuxtest.SampleRecord(bpfKindCPU, r.Pid, r.Tid, 1<<62, 1e6, nil, nil, perfRegs[i], stack)
		recs = append(recs, rec)
	}
	s := replayBPF(&linuxtest.CountHandler{}, platform.UnwindDWARF, uint32(pid))
	for i := range h.Mods {
		m := &h.Mods[i]
		s.LoadModule(m.Time, m.Pid, m.Base, m.Base+m.Size, m.FileOffset, 0, 0, m.Path, m.BuildID)
	}
	for _, rec := range recs { // warm: tables built
		s.handleBPF(rec)
	}
	frames := 0
	s.SetHandler(&linuxtest.FrameCounter{N: &frames})
	bytes := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec := recs[i%len(recs)]
		bytes += len(rec)
		s.handleBPF(rec)
	}
	b.ReportMetric(float64(frames)/float64(b.N), "frames/sample")
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/sample")
}

// launchPerf is perf.Launch for linuxtest.CaptureRaw: the records are
// captured with the perf back end and replayed as BPF records.
func launchPerf(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (linuxtest.Session, error) {
	s, err := perf.Launch(cmd, cfg, h)
	if err != nil {
		return nil, err
	}
	return s, nil
}
