//go:build linux

package tracking_test

import (
	"context"
	"encoding/binary"
	"io"
	"os/exec"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/internal/linuxtest"
	"github.com/rawstack/rawstack/platform/linux/perf"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// encodeHandler encodes samples as a recorder does: each stack interned
// once (a Stack event), then a Sample event naming it, into a Writer.
type encodeHandler struct {
	linuxtest.CountHandler
	w      *format.Writer
	ids    map[string]uint64
	key    []byte
	frames int
}

func newEncodeHandler(tb testing.TB) *encodeHandler {
	w, err := format.NewWriter(io.Discard, format.Header{Version: format.Version1, PointerSize: 8, OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return &encodeHandler{w: w, ids: map[string]uint64{}}
}

func (h *encodeHandler) Sample(s *platform.Sample) {
	h.Samples++
	h.frames += len(s.PCs)
	h.key = h.key[:0]
	for _, pc := range s.PCs {
		h.key = binary.LittleEndian.AppendUint64(h.key, pc)
	}
	id, ok := h.ids[string(h.key)]
	if !ok {
		id = uint64(len(h.ids) + 1)
		h.ids[string(h.key)] = id
		h.w.WriteStack(id, s.PCs)
	}
	h.w.WriteSample(format.Sample{Time: s.Time, Pid: s.Pid, Tid: s.Tid, CPU: format.NoCPU, Weight: 1, Stack: id})
}

// leafRecords samples the shrinkwrap fixture (main → a → b → c built with
// frame pointers; c's hot loop runs before it links its frame) and returns
// its pid, modules and, per sample, the two records the kernel would have
// written: --unwind fp's (the user frame-pointer chain) and --unwind
// auto's (the same chain plus user registers and a tracking.LeafWindow stack
// copy). The chain is walked here over the sampled stack as the kernel
// walks it.
func leafRecords(tb testing.TB) (pid int, mods []format.ModuleLoad, fp, auto [][]byte) {
	if runtime.GOARCH != "amd64" {
		testbuild.Impossible(tb, "amd64-only") // the records carry amd64 registers
	}
	testbuild.Feature(tb, perf.Probe())
	bin := linuxtest.BuildC(tb, "../../../tracer/testdata/shrinkwrap.c", "-O2", "-fno-omit-frame-pointer")
	h := &linuxtest.RawCapture{}
	s, err := perf.Launch(exec.Command(bin, "0.3"), platform.Config{Frequency: 2000, Unwind: platform.UnwindDWARF, KeepRaw: true}, h)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s.Run(ctx)
	cancel()
	s.Close()
	if len(h.Raws) < 50 {
		tb.Fatalf("only %d raw samples captured", len(h.Raws))
	}
	le := binary.LittleEndian
	for _, r := range h.Raws {
		var regs arch.Regs
		if err := regs.SetMasked(arch.AMD64, r.RegMask, r.Regs); err != nil {
			tb.Fatal(err)
		}
		sp := regs.SP()
		chain := []uint64{tracking.PerfContextUser, regs.PC()}
		for fp := regs.FP(); fp >= sp && fp-sp+16 <= uint64(len(r.Stack)) && len(chain) < 64; {
			next, ra := le.Uint64(r.Stack[fp-sp:]), le.Uint64(r.Stack[fp-sp+8:])
			if ra == 0 {
				break
			}
			chain = append(chain, ra)
			if next <= fp {
				break
			}
			fp = next
		}
		var vals []uint64
		for p := 0; p < 64; p++ {
			if arch.PerfRegsAMD64&(1<<uint(p)) != 0 {
				vals = append(vals, regs.R[arch.PerfToDWARF(arch.AMD64, p)])
			}
		}
		window := r.Stack[:min(len(r.Stack), tracking.LeafWindow)]
		a := tracking.DwarfSampleRecord(chain, 2, vals, window, tracking.LeafWindow, uint64(len(window)))
		f := tracking.SampleRecord(r.Pid, r.Tid, chain...)
		for _, rec := range [][]byte{a, f} {
			le.PutUint32(rec[8+8:], r.Pid)
			le.PutUint32(rec[8+12:], r.Tid)
			le.PutUint64(rec[8+16:], 1<<62) // never late
		}
		auto, fp = append(auto, a), append(fp, f)
	}
	return s.Pid(), h.Mods, fp, auto
}

// leafSessions returns replay sessions of --unwind fp and of --unwind
// auto on a frame-pointer program (the kernel chain plus repairLeaf),
// with mods loaded, and their handlers.
func leafSessions(pid int, mods []format.ModuleLoad, fpH, autoH platform.Handler) (fp, auto *tracking.Tracker) {
	fp = tracking.New(platform.Config{Pid: pid, Unwind: platform.UnwindFP}, fpH)
	auto = tracking.New(platform.Config{Pid: pid, Unwind: platform.UnwindAuto}, autoH)
	tracking.SetLeafRepair(auto) // what ChooseAuto decides for this program
	for _, s := range []*tracking.Tracker{fp, auto} {
		s.SetTarget(pid, false)
		for i := range mods {
			m := &mods[i]
			s.LoadModule(m.Time, m.Pid, m.Base, m.Base+m.Size, m.FileOffset, 0, 0, m.Path, m.BuildID)
		}
	}
	return fp, auto
}

// BenchmarkLeafRepair is the host's per-sample cost of --unwind auto on a
// frame-pointer program against --unwind fp's, on the same samples of a
// real program: decoding the record (auto's carries registers and a
// 512-byte stack copy), auto's leaf repair (the CFI row of the pc,
// arch.LeafCaller, the joined chain) and encoding the sample. The unwind
// tables are built before the timer starts: this is the marginal cost per
// sample, apart from the one-off table build per module. Each iteration
// replays a block of samples in fp mode, then the same block in auto mode
// (A B A B, so load on a shared machine falls on both); it reports both
// costs per sample and the median of the blocks' auto/fp ratios.
func BenchmarkLeafRepair(b *testing.B) {
	pid, mods, fpRecs, autoRecs := leafRecords(b)
	fpH, autoH := newEncodeHandler(b), newEncodeHandler(b)
	fp, auto := leafSessions(pid, mods, fpH, autoH)
	for i := range autoRecs { // warm: tables built, stacks interned
		fp.Replay(fpRecs[i])
		auto.Replay(autoRecs[i])
	}
	const block = 256
	var fpT, autoT time.Duration
	var ratios []float64
	n, k := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		for i := 0; i < block; i++ {
			fp.Replay(fpRecs[(k+i)%len(fpRecs)])
		}
		t1 := time.Now()
		for i := 0; i < block; i++ {
			auto.Replay(autoRecs[(k+i)%len(autoRecs)])
		}
		t2 := time.Now()
		fpT, autoT = fpT+t1.Sub(t0), autoT+t2.Sub(t1)
		ratios = append(ratios, float64(t2.Sub(t1))/float64(t1.Sub(t0)))
		n += block
		k += block
	}
	sort.Float64s(ratios)
	b.ReportMetric(float64(fpT.Nanoseconds())/float64(n), "fp-ns/sample")
	b.ReportMetric(float64(autoT.Nanoseconds())/float64(n), "auto-ns/sample")
	b.ReportMetric(ratios[len(ratios)/2], "auto/fp")
	b.ReportMetric(float64(autoH.frames)/float64(autoH.Samples)-float64(fpH.frames)/float64(fpH.Samples), "frames-added/sample")
}

// TestLeafRepairAllocs pins --unwind auto's per-sample path (decode, leaf
// repair, report) at zero allocations once warm, on real samples, and
// checks that the repair adds the frame frame pointers miss.
func TestLeafRepairAllocs(t *testing.T) {
	pid, mods, fpRecs, autoRecs := leafRecords(t)
	fpH, autoH := &linuxtest.FrameCounter{N: new(int)}, &linuxtest.FrameCounter{N: new(int)}
	fp, auto := leafSessions(pid, mods, fpH, autoH)
	for i := range autoRecs {
		fp.Replay(fpRecs[i])
		auto.Replay(autoRecs[i])
	}
	if *autoH.N <= *fpH.N {
		t.Errorf("auto reported %d frames over %d samples, fp %d: no leaf repaired", *autoH.N, len(autoRecs), *fpH.N)
	}
	t.Logf("%d samples: fp %d frames, auto %d", len(autoRecs), *fpH.N, *autoH.N)
	i := 0
	if allocs := testing.AllocsPerRun(200, func() { auto.Replay(autoRecs[i%len(autoRecs)]); i++ }); allocs != 0 {
		t.Errorf("%.2f allocations per auto sample, want 0", allocs)
	}
}
