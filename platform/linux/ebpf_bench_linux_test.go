//go:build linux && amd64

package linux

import (
	"testing"

	"github.com/rawstack/rawstack/platform"
)

// BenchmarkBPFRecord measures the eBPF back end's host work per sample:
// decoding a BPF ring record (registers and an 8 KiB-capped stack copy of
// a real program built without frame pointers), unwinding it with the
// session's lazy tables once warm, and reporting it. The first touch of a
// module's table is BenchmarkLazyTableELF's (package arch).
func BenchmarkBPFRecord(b *testing.B) {
	h, pid, perfRegs := captureRaw(b)
	var recs [][]byte
	for i, r := range h.raws {
		stack := r.Stack
		if len(stack) > bpfMaxStack {
			stack = stack[:bpfMaxStack]
		}
		rec := bpfRecord(bpfKindCPU, r.Pid, r.Tid, 1<<62, 1e6, nil, nil, perfRegs[i], stack)
		recs = append(recs, rec)
	}
	s := replayBPF(&countHandler{}, platform.UnwindDWARF, uint32(pid))
	for i := range h.mods {
		m := &h.mods[i]
		s.loadModule(m.Time, m.Pid, m.Base, m.Base+m.Size, m.FileOffset, 0, 0, m.Path, m.BuildID)
	}
	for _, rec := range recs { // warm: tables built
		s.handleBPF(rec)
	}
	frames := 0
	s.h = &frameCounter{n: &frames}
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
