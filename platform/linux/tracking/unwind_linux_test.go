//go:build linux

package tracking

import (
	"encoding/binary"
	"math/bits"
	"os"
	"runtime"
	"testing"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/internal/linuxtest"
)

// TestKeepsFramePointers checks --unwind auto's heuristic on one program
// built with and without frame pointers, and on libc (built without).
func TestKeepsFramePointers(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testbuild.Impossible(t, "amd64-only") // the fixtures are checked on amd64
	}
	frac := func(tab *arch.Table) float64 {
		fp, n := 0, 0
		for i := 0; i < tab.Len(); i++ {
			if _, r := tab.Row(i); r.CFA != arch.CFANone {
				n++
				if r.CFA == arch.CFAReg && int(r.CFAReg) == arch.AMD64.FP() {
					fp++
				}
			}
		}
		return float64(fp) / float64(max(n, 1))
	}
	for _, c := range []struct {
		flag string
		want bool
	}{{"-fno-omit-frame-pointer", true}, {"-fomit-frame-pointer", false}} {
		bin := buildFixture(t, "fpchain.c", "-O2", c.flag)
		tab, err := arch.OpenTable(bin)
		if err != nil {
			t.Fatal(err)
		}
		got := keepsFramePointers(arch.AMD64, tab)
		t.Logf("%s: %.0f%% of rows compute the CFA from rbp", c.flag, 100*frac(tab))
		if got != c.want {
			t.Errorf("%s: keepsFramePointers = %v, want %v", c.flag, got, c.want)
		}
	}
	for _, libc := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"} {
		if _, err := os.Stat(libc); err != nil {
			continue
		}
		tab, err := arch.OpenTable(libc)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.1f%% of rows compute the CFA from rbp", libc, 100*frac(tab))
		if keepsFramePointers(arch.AMD64, tab) {
			t.Errorf("%s: said to keep frame pointers", libc)
		}
		break
	}
	if !keepsFramePointers(arch.AMD64, nil) {
		t.Error("a module without unwind info must use frame pointers")
	}
}

// TestDWARFReplay runs DWARF-mode records through a session without
// kernel events: a sample the reader reaches too late is reported lost
// (LostUnwind), a fresh one is unwound, and KeepRaw passes registers and
// stack through.
func TestDWARFReplay(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testbuild.Impossible(t, "amd64-only") // the records carry amd64 registers
	}
	n := bits.OnesCount64(arch.PerfRegsAMD64)
	regs := make([]uint64, n)
	regs[7], regs[8] = 0x7ffe0000, 0x401000 // perf order: sp, ip
	stack := make([]byte, 64)
	mk := func(time uint64) []byte {
		b := dwarfSampleRecord([]uint64{perfContextKern, 0xffffffff81000010}, 2, regs, stack, 64, 64)
		binary.LittleEndian.PutUint64(b[8+16:], time)
		return b
	}
	for _, keep := range []bool{false, true} {
		h := &linuxtest.RawHandler{}
		s := New(platform.Config{Pid: 7, Unwind: platform.UnwindDWARF, KeepRaw: keep}, h)
		s.pid = 7
		s.Replay(mk(1)) // at boot: far behind
		if keep {
			if h.Samples != 1 || h.NLost != 0 {
				t.Fatalf("keep-raw: an old sample gave %d samples, %d lost; raw samples are never late", h.Samples, h.NLost)
			}
			if h.Last.RegMask&(1<<arch.AMD64RSP) == 0 || h.Last.StackAddr != 0x7ffe0000 || len(h.Last.Stack) != 64 || len(h.Last.PCs) != 1 || h.Last.PCs[0] != 0xffffffff81000010 {
				t.Errorf("keep-raw sample: mask %#x stack at %#x, %d bytes, pcs %x", h.Last.RegMask, h.Last.StackAddr, len(h.Last.Stack), h.Last.PCs)
			}
			continue
		}
		if h.Samples != 0 || h.NLost != 1 || len(h.Reasons) != 1 || h.Reasons[0] != format.LostUnwind {
			t.Fatalf("a sample %v late gave %d samples, lost %d %v; want it lost (LostUnwind)", "seconds", h.Samples, h.NLost, h.Reasons)
		}
		s.Replay(mk(uint64(sys.Monotonic())))
		if h.Samples != 1 || len(h.Last.PCs) < 2 || h.Last.PCs[0] != 0xffffffff81000010 || h.Last.PCs[1] != 0x401000 || h.Last.Stack != nil {
			t.Errorf("fresh sample: %d samples, pcs %x", h.Samples, h.Last.PCs)
		}
		if st := s.Stats(); st.Lost != 1 || st.Samples != 1 {
			t.Errorf("stats %+v, want 1 sample and 1 lost", st)
		}
	}
}

// TestDWARFSampleAllocs pins the online unwinding path (decode, unwind,
// report) at zero allocations once warm.
func TestDWARFSampleAllocs(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		testbuild.Impossible(t, "amd64-only") // the records carry amd64 registers
	}
	n := bits.OnesCount64(arch.PerfRegsAMD64)
	regs := make([]uint64, n)
	regs[6], regs[7], regs[8] = 0x7ffe0010, 0x7ffe0000, 0x401000 // bp, sp, ip
	stack := make([]byte, 256)
	binary.LittleEndian.PutUint64(stack[0x10:], 0x7ffe0040) // saved rbp
	binary.LittleEndian.PutUint64(stack[0x18:], 0x402000)   // return address
	rec := dwarfSampleRecord(nil, 2, regs, stack, 256, 256)
	binary.LittleEndian.PutUint64(rec[8+16:], 1<<62) // never late
	h := &linuxtest.CountHandler{}
	s := New(platform.Config{Pid: 7, Unwind: platform.UnwindDWARF}, h)
	s.pid = 7
	s.Replay(rec)
	if allocs := testing.AllocsPerRun(100, func() { s.Replay(rec) }); allocs != 0 {
		t.Errorf("%.1f allocations per DWARF sample, want 0", allocs)
	}
	if h.Samples != 102 {
		t.Errorf("%d samples reported, want 102", h.Samples)
	}
}

// TestDWARFNoUserStack: a sample without user registers keeps its kernel
// frames, and one with neither is counted lost, not dropped silently.
func TestDWARFNoUserStack(t *testing.T) {
	h := &linuxtest.RawHandler{}
	s := New(platform.Config{Pid: 7, Unwind: platform.UnwindDWARF}, h)
	s.pid = 7
	s.Replay(dwarfSampleRecord([]uint64{perfContextKern, 0xffffffff81000010}, 0, nil, nil, 0, 0))
	if h.Samples != 1 || len(h.Last.PCs) != 1 || h.Last.PCs[0] != 0xffffffff81000010 {
		t.Errorf("kernel-only sample: %d samples, pcs %x", h.Samples, h.Last.PCs)
	}
	s.Replay(dwarfSampleRecord(nil, 0, nil, nil, 0, 0))
	if h.Samples != 1 || h.NLost != 1 || len(h.Reasons) != 1 || h.Reasons[0] != format.LostUnwind {
		t.Errorf("empty sample: %d samples, %d lost %v; want it lost (LostUnwind)", h.Samples, h.NLost, h.Reasons)
	}
}
