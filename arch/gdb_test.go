package arch

import (
	"bufio"
	"debug/elf"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// gdbStop is one stop of the inferior as testdata/gdbdump.py recorded it.
type gdbStop struct {
	frames []uint64
	names  []string
	regs   Regs
	maps   []gdbMap
	texts  []gdbMap // remote (qemu) stops: each objfile's .text start and path
	stack  StackCopy
}

type gdbMap struct {
	start, end, off uint64
	path            string
}

// gdbDump runs bin under gdb, stopping at breaks and then single-stepping
// steps instructions, and returns every stop.
func gdbDump(t *testing.T, bin, breaks string, steps int) []gdbStop {
	return gdbDumpTB(t, bin, breaks, steps, 0)
}

// gdbDumpTB is gdbDump stopping at hits breakpoint hits (0: one per
// breakpoint).
func gdbDumpTB(t testing.TB, bin, breaks string, steps, hits int) []gdbStop {
	t.Helper()
	testbuild.Need(t, "gdb", "gdb is the unwinding oracle")
	return runGDB(t, "gdb", AMD64, bin, breaks, steps, hits)
}

// gdbDumpARM64 runs an aarch64 program under qemu-user with its gdbstub
// and records stops like gdbDump, with gdb-multiarch as the oracle.
func gdbDumpARM64(t *testing.T, bin, breaks string, steps int, qemuArgs ...string) []gdbStop {
	t.Helper()
	testbuild.Need(t, "gdb-multiarch", "gdb-multiarch is the arm64 unwinding oracle")
	qemu := testbuild.Need(t, "qemu-aarch64", "qemu-user runs the arm64 fixture")
	const sysroot = "/usr/aarch64-linux-gnu"
	if _, err := os.Stat(filepath.Join(sysroot, "lib", "libc.so.6")); err != nil {
		testbuild.Skip(t, "no aarch64 libc under %s: %v", sysroot, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	q := exec.Command(qemu, append(append([]string{"-L", sysroot, "-g", strconv.Itoa(port)}, qemuArgs...), bin)...)
	if err := q.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		q.Process.Kill()
		q.Wait()
	}()
	t.Setenv("DUMP_REMOTE", fmt.Sprintf("127.0.0.1:%d", port))
	t.Setenv("DUMP_SYSROOT", sysroot)
	return runGDB(t, "gdb-multiarch", ARM64, bin, breaks, steps, 0)
}

func runGDB(t testing.TB, gdbTool string, a Arch, bin, breaks string, steps, hits int) []gdbStop {
	t.Helper()
	dir := t.TempDir()
	script, err := filepath.Abs(filepath.Join("testdata", "gdbdump.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gdbTool, "-batch", "-nx", "-x", script, bin)
	cmd.Env = append(os.Environ(), "DUMP_OUT="+dir, "DUMP_BREAKS="+breaks, "DUMP_STEPS="+strconv.Itoa(steps))
	if hits > 0 {
		cmd.Env = append(cmd.Env, "DUMP_HITS="+strconv.Itoa(hits))
	}
	timer := time.AfterFunc(2*time.Minute, func() {
		if cmd.Process != nil {
			cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	if err != nil {
		// A container without CAP_SYS_PTRACE (or with ptrace_scope 3)
		// cannot run the oracle; anywhere else a failure is a failure.
		if strings.Contains(string(out), "ptrace: Operation not permitted") || strings.Contains(string(out), "Could not attach") {
			testbuild.Skip(t, "gdb cannot trace here: %s", out)
		}
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	f, err := os.Open(filepath.Join(dir, "stops.txt"))
	if err != nil {
		if strings.Contains(string(out), "ptrace") {
			testbuild.Skip(t, "gdb cannot trace here: %s", out)
		}
		t.Fatalf("gdb wrote no stops: %v\n%s", err, out)
	}
	defer f.Close()
	var stops []gdbStop
	var cur *gdbStop
	ended := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) == 0 {
			continue
		}
		hex := func(i int) uint64 {
			v, err := strconv.ParseUint(fl[i], 16, 64)
			if err != nil {
				t.Fatalf("stops.txt: %q: %v", sc.Text(), err)
			}
			return v
		}
		switch fl[0] {
		case "stop":
			stops = append(stops, gdbStop{regs: Regs{Arch: a}})
			cur = &stops[len(stops)-1]
		case "frame":
			cur.frames = append(cur.frames, hex(1))
			cur.names = append(cur.names, fl[2])
		case "reg":
			n := regNum(a, fl[1])
			if n < 0 {
				t.Fatalf("unknown register %q", fl[1])
			}
			cur.regs.Set(n, hex(2))
		case "text":
			cur.texts = append(cur.texts, gdbMap{start: hex(1), path: fl[2]})
		case "map":
			cur.maps = append(cur.maps, gdbMap{hex(1), hex(2), hex(3), fl[4]})
		case "stack":
			cur.stack.Addr = hex(1)
			data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("stack-%d.bin", len(stops)-1)))
			if err != nil {
				t.Fatal(err)
			}
			cur.stack.Data = data
		case "end":
			ended = true
		}
	}
	if !ended {
		t.Fatalf("stops.txt is incomplete; gdb said:\n%s", out)
	}
	return stops
}

// tableCache holds each ELF file's table across stops.
type tableCache map[string]*Table

// modulesFor builds the module list of a stop from its mappings: one
// module per ELF file, spanning all its mappings. skip names files to
// leave without a table (the unwinder must use frame pointers there).
func (tc tableCache) modulesFor(t testing.TB, maps []gdbMap, skip func(string) bool) *Modules {
	t.Helper()
	type span struct{ start, end, bias uint64 }
	spans := map[string]*span{}
	var order []string
	for _, m := range maps {
		if m.path == "-" {
			continue
		}
		if s, ok := spans[m.path]; ok {
			s.end = max(s.end, m.end)
			continue
		}
		f, err := elf.Open(m.path)
		if err != nil {
			continue // not an ELF file
		}
		bias, err := LoadBias(f, m.start, m.off)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", m.path, err)
		}
		spans[m.path] = &span{m.start, m.end, bias}
		order = append(order, m.path)
	}
	ms := &Modules{}
	for _, p := range order {
		s := spans[p]
		var tab *Table
		if skip == nil || !skip(p) {
			var ok bool
			if tab, ok = tc[p]; !ok {
				var err error
				if tab, err = OpenTable(p); err != nil {
					t.Fatalf("OpenTable(%s): %v", p, err)
				}
				tc[p] = tab
			}
		}
		ms.Add(Module{Start: s.start, End: s.end, Bias: s.bias, Table: tab})
	}
	return ms
}

func formatFrames(pcs []uint64, names []string) string {
	var b strings.Builder
	for i, pc := range pcs {
		fmt.Fprintf(&b, "\n  #%d %#x", i, pc)
		if i < len(names) {
			b.WriteString(" " + names[i])
		}
	}
	return b.String()
}

// TestUnwindMatchesGDB stops -O2 -fomit-frame-pointer programs under gdb
// at every instruction over a stretch of their run, unwinds each recorded
// register set and stack copy with CFI from the ELF files, and compares
// frame by frame with gdb's backtrace. deep.c from with_alloca's entry:
// prologue, an rbp-based frame, a call through the PLT into libc (lazily
// bound in the clang build: ld.so's resolver), the leaf and back. deep.cpp
// from marker: returning through template frames whose epilogues run
// std::vector destructors into libstdc++ and libc, a hot/cold split
// function, a virtual call.
func TestUnwindMatchesGDB(t *testing.T) {
	for _, c := range []struct {
		name, cc, src, brk string
		flags              []string
	}{
		{"gcc-O2-omitfp", "gcc", "deep.c", "with_alloca", []string{"-O2", "-fomit-frame-pointer"}},
		{"clang-O2-omitfp", "clang", "deep.c", "with_alloca", []string{"-O2", "-fomit-frame-pointer"}},
		{"g++-O2-omitfp", "g++", "deep.cpp", "marker", []string{"-O2", "-fomit-frame-pointer"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := testbuild.CC(t, c.cc, "", []string{filepath.Join("testdata", c.src)}, c.flags...)
			stops := gdbDump(t, bin, c.brk, 150)
			tc := tableCache{}
			u := &Unwinder{}
			var pcs []uint64
			checked, deepest := 0, 0
			for i, s := range stops {
				if len(s.frames) == 0 || s.stack.Data == nil {
					t.Fatalf("stop %d: incomplete dump", i)
				}
				u.Modules = tc.modulesFor(t, s.maps, nil)
				pcs = u.Unwind(&s.regs, &s.stack, pcs[:0])
				if !equalPCs(pcs, s.frames) {
					t.Errorf("stop %d at %#x (%s): unwound %d frames (stop: %v), gdb %d\nours:%s\ngdb:%s",
						i, s.regs.PC(), s.names[0], len(pcs), u.Stop, len(s.frames), formatFrames(pcs, nil), formatFrames(s.frames, s.names))
					continue
				}
				if u.Stop != StopOutermost {
					t.Errorf("stop %d: unwind ended with %v, want outermost", i, u.Stop)
				}
				checked++
				deepest = max(deepest, len(pcs))
			}
			t.Logf("%d stops match gdb frame for frame (deepest %d frames)", checked, deepest)
			if checked < 100 {
				t.Errorf("only %d stops checked", checked)
			}
		})
	}
}

func equalPCs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestUnwindFramePointerFallback unwinds a -O0 -fno-omit-frame-pointer
// program whose own module is given no unwind table, so its frames are
// stepped with frame pointers, while libc and ld.so frames (built without
// frame pointers) use their CFI. The whole chain must equal gdb's. With
// no tables at all, frame pointers alone must match gdb up to the first
// libc frame.
func TestUnwindFramePointerFallback(t *testing.T) {
	bin := testbuild.CC(t, "gcc", "", []string{"testdata/deep.c"}, "-O0", "-fno-omit-frame-pointer")
	stops := gdbDump(t, bin, "*marker+4", 0)
	if len(stops) != 1 {
		t.Fatalf("%d stops, want 1", len(stops))
	}
	s := stops[0]
	if s.names[0] != "marker" {
		t.Fatalf("stopped in %s, want marker", s.names[0])
	}
	tc := tableCache{}
	u := &Unwinder{Modules: tc.modulesFor(t, s.maps, func(p string) bool { return p == bin })}
	pcs := u.Unwind(&s.regs, &s.stack, nil)
	if !equalPCs(pcs, s.frames) {
		t.Fatalf("mixed unwind (stop: %v):\nours:%s\ngdb:%s", u.Stop, formatFrames(pcs, nil), formatFrames(s.frames, s.names))
	}
	if u.FPFrames < 5 || u.CFIFrames < 3 {
		t.Errorf("stepped %d frames with frame pointers and %d with CFI; want both used", u.FPFrames, u.CFIFrames)
	}
	t.Logf("mixed: %d frames match gdb (%d by frame pointer, %d by CFI), stop: %v", len(pcs), u.FPFrames, u.CFIFrames, u.Stop)

	u = &Unwinder{Modules: &Modules{}}
	pcs = u.Unwind(&s.regs, &s.stack, nil)
	n := 0
	for n < len(s.names) && !strings.HasPrefix(s.names[n], "msort") {
		n++
	}
	n++ // the first libc frame is found through cmp's frame pointer
	if len(pcs) < n || !equalPCs(pcs[:n], s.frames[:n]) {
		t.Fatalf("frame-pointer unwind, first %d frames:\nours:%s\ngdb:%s", n, formatFrames(pcs, nil), formatFrames(s.frames, s.names))
	}
	if u.Stop == StopNone || u.Stop == StopMaxFrames {
		t.Errorf("frame-pointer unwind through libc ended with %v", u.Stop)
	}
	t.Logf("frame pointers only: first %d frames match gdb; then %d more, stop: %v", n, len(pcs)-n, u.Stop)
}

// BenchmarkUnwindRecorded unwinds a real stack (the deep.c chain through
// libc's qsort, 18 frames, recorded under gdb) with the tables of the
// program, libc and ld.so, rules cached.
func BenchmarkUnwindRecorded(b *testing.B) {
	bin := testbuild.CC(b, "gcc", "", []string{"testdata/deep.c"}, "-O2", "-fomit-frame-pointer")
	stops := gdbDumpTB(b, bin, "marker", 0, 0)
	s := stops[0]
	u := NewUnwinder(tableCache{}.modulesFor(b, s.maps, nil))
	pcs := u.Unwind(&s.regs, &s.stack, make([]uint64, 0, 64))
	if !equalPCs(pcs, s.frames) {
		b.Fatalf("unwind differs from gdb")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pcs = u.Unwind(&s.regs, &s.stack, pcs[:0])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pcs)), "ns/frame")
}

// BenchmarkOpenTableLibc measures parsing libc.so.6's .eh_frame into a
// table.
func BenchmarkOpenTableLibc(b *testing.B) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		testbuild.Skip(b, "no %s", libc)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := OpenTable(libc); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUnwindSignalFrames stops in two signal handlers under gdb, one for a
// raise() from a known chain and one for a timer that interrupts a
// spinning loop, and unwinds through glibc's __restore_rt (CIE "zRS",
// registers in the sigcontext at sp) into the interrupted code.
func TestUnwindSignalFrames(t *testing.T) {
	for _, c := range []struct {
		name, cc string
		flags    []string
	}{
		{"gcc-O2-omitfp", "gcc", []string{"-O2", "-fomit-frame-pointer"}},
		{"clang-O2-omitfp", "clang", []string{"-O2", "-fomit-frame-pointer"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := testbuild.CC(t, c.cc, "", []string{"testdata/signal.c"}, c.flags...)
			stops := gdbDumpTB(t, bin, "marker", 0, 2)
			if len(stops) != 2 {
				t.Fatalf("%d stops, want 2", len(stops))
			}
			tc := tableCache{}
			for i, s := range stops {
				sig := -1
				for j, n := range s.names {
					if n == "__restore_rt" {
						sig = j
					}
				}
				u := NewUnwinder(tc.modulesFor(t, s.maps, nil))
				pcs := u.Unwind(&s.regs, &s.stack, nil)
				if !equalPCs(pcs, s.frames) || u.Stop != StopOutermost {
					t.Errorf("stop %d (stop: %v):\nours:%s\ngdb:%s", i, u.Stop, formatFrames(pcs, nil), formatFrames(s.frames, s.names))
					continue
				}
				want := "raiser"
				if i == 1 {
					want = "spin"
				}
				found := false
				for _, n := range s.names {
					found = found || n == want
				}
				if !found {
					t.Errorf("stop %d: gdb's chain has no %s:%s", i, want, formatFrames(s.frames, s.names))
				}
				t.Logf("stop %d: %d frames through the signal frame (#%d) match gdb", i, len(pcs), sig)
			}
		})
	}
}

// modulesFromTexts builds the modules of a remote stop from each objfile's
// runtime .text address: the bias is that minus .text's link address, and
// the module spans the file's PT_LOAD segments.
func (tc tableCache) modulesFromTexts(t testing.TB, texts []gdbMap) *Modules {
	t.Helper()
	ms := &Modules{}
	for _, x := range texts {
		f, err := elf.Open(x.path)
		if err != nil {
			t.Fatalf("%s: %v", x.path, err)
		}
		text := f.Section(".text")
		if text == nil {
			t.Fatalf("%s: no .text", x.path)
		}
		bias := x.start - text.Addr
		lo, hi := ^uint64(0), uint64(0)
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD {
				lo, hi = min(lo, p.Vaddr), max(hi, p.Vaddr+p.Memsz)
			}
		}
		f.Close()
		tab, ok := tc[x.path]
		if !ok {
			if tab, err = OpenTable(x.path); err != nil {
				t.Fatalf("OpenTable(%s): %v", x.path, err)
			}
			tc[x.path] = tab
		}
		ms.Add(Module{Start: lo + bias, End: hi + bias, Bias: bias, Table: tab})
	}
	return ms
}

// TestUnwindARM64Recorded runs the aarch64 build of deep.c under
// qemu-user, stops at every instruction from with_alloca's entry on
// (prologue, an x29-based frame, calls into the aarch64 libc and back) and
// compares each unwind of the recorded registers and stack with gdb's
// (gdb-multiarch) backtrace.
func TestUnwindARM64Recorded(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
		qemu  []string
	}{
		{"O2-omitfp", []string{"-O2", "-fomit-frame-pointer"}, nil},
		// Return addresses signed with pointer authentication (qemu's
		// "max" CPU implements it): the saved lr carries a PAC.
		{"pac", []string{"-O2", "-mbranch-protection=standard"}, []string{"-cpu", "max"}},
	} {
		t.Run(c.name, func(t *testing.T) { testARM64Recorded(t, c.flags, c.qemu) })
	}
}

// deepCallers is deep.c's chain above the qsort comparator, outermost last.
var deepCallers = []string{"cmp", "via_qsort", "recurse", "recurse", "recurse", "recurse", "recurse", "big_frame", "no_frame", "main", "_start"}

func testARM64Recorded(t *testing.T, flags, qemuArgs []string) {
	pac := len(qemuArgs) > 0
	bin := testbuild.CC(t, "aarch64-linux-gnu-gcc", "", []string{"testdata/deep.c"}, flags...)
	stops := gdbDumpARM64(t, bin, "with_alloca", 120, qemuArgs...)
	tc := tableCache{}
	u := NewUnwinder(nil)
	var pcs []uint64
	checked, deepest := 0, 0
	for i, s := range stops {
		if len(s.frames) == 0 || s.stack.Data == nil || len(s.texts) == 0 {
			t.Fatalf("stop %d: incomplete dump", i)
		}
		u.Modules = tc.modulesFromTexts(t, s.texts)
		pcs = u.Unwind(&s.regs, &s.stack, pcs[:0])
		if pac {
			// gdb cannot strip the PAC through qemu's gdbstub, so its
			// backtrace stops at the first signed return address. Check
			// gdb's frames with the PAC cut off, then that the rest of the
			// walk goes through deep.c's known callers to _start.
			n := len(s.frames)
			for j := range s.frames {
				s.frames[j] &= 1<<48 - 1
			}
			names := funcNames(t, bin, s.texts, pcs)
			k := len(names) - len(deepCallers)
			if len(pcs) < n || !equalPCs(pcs[:n], s.frames) || u.Stop != StopOutermost || k < 0 || strings.Join(names[k:], " ") != strings.Join(deepCallers, " ") {
				t.Errorf("stop %d at %#x: stop %v; ours:%s\nnames %v\ngdb (PAC stripped):%s", i, s.regs.PC(), u.Stop, formatFrames(pcs, nil), names, formatFrames(s.frames, s.names))
				continue
			}
			checked++
			deepest = max(deepest, len(pcs))
			continue
		}
		if !equalPCs(pcs, s.frames) || u.Stop != StopOutermost {
			t.Errorf("stop %d at %#x (%s): %d frames (stop: %v), gdb %d\nours:%s\ngdb:%s",
				i, s.regs.PC(), s.names[0], len(pcs), u.Stop, len(s.frames), formatFrames(pcs, nil), formatFrames(s.frames, s.names))
			continue
		}
		checked++
		deepest = max(deepest, len(pcs))
	}
	t.Logf("%d arm64 stops match gdb (pac: gdb's frames with the PAC cut, then deep.c's callers to _start; deepest %d frames)", checked, deepest)
	if checked < 100 {
		t.Errorf("only %d stops checked", checked)
	}
}

// funcNames returns the names of the functions of bin that the frames in
// pcs (leaf first; return addresses after the first) fall in, in order,
// skipping frames outside bin; texts gives bin's .text runtime address.
func funcNames(t *testing.T, bin string, texts []gdbMap, pcs []uint64) []string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var bias uint64
	found := false
	for _, x := range texts {
		if x.path == bin {
			bias, found = x.start-f.Section(".text").Addr, true
		}
	}
	if !found {
		t.Fatalf("gdb listed no .text for %s", bin)
	}
	var names []string
	for i, pc := range pcs {
		if i > 0 {
			pc--
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value+bias <= pc && pc < s.Value+bias+s.Size {
				names = append(names, s.Name)
				break
			}
		}
	}
	return names
}

// TestPerfSampleFlow feeds a recorded stop through the path the perf back
// end takes: registers as a PERF_SAMPLE_REGS_USER block sampled with
// PerfRegsAMD64, the stack as an 8 KiB PERF_SAMPLE_STACK_USER copy from
// sp, unwound with Regs.SetPerf and a StackCopy.
func TestPerfSampleFlow(t *testing.T) {
	bin := testbuild.CC(t, "gcc", "", []string{"testdata/deep.c"}, "-O2", "-fomit-frame-pointer")
	s := gdbDump(t, bin, "marker", 0)[0]
	var block []uint64
	for p := 0; p < 64; p++ {
		if PerfRegsAMD64&(1<<p) != 0 {
			block = append(block, s.regs.R[PerfToDWARF(AMD64, p)])
		}
	}
	var regs Regs
	if err := regs.SetPerf(AMD64, PerfRegsAMD64, block); err != nil {
		t.Fatal(err)
	}
	data := s.stack.Data[:min(len(s.stack.Data), 8192)]
	u := NewUnwinder(tableCache{}.modulesFor(t, s.maps, nil))
	pcs := u.Unwind(&regs, &StackCopy{Addr: regs.SP(), Data: data}, nil)
	if len(data) == len(s.stack.Data) {
		if !equalPCs(pcs, s.frames) {
			t.Fatalf("ours:%s\ngdb:%s", formatFrames(pcs, nil), formatFrames(s.frames, s.names))
		}
	} else if len(pcs) == 0 || !equalPCs(pcs, s.frames[:len(pcs)]) || u.Stop != StopBadMemory {
		t.Fatalf("8 KiB copy of a %d-byte stack: stop %v\nours:%s\ngdb:%s", len(s.stack.Data), u.Stop, formatFrames(pcs, nil), formatFrames(s.frames, s.names))
	}
	t.Logf("%d frames from a %d-byte stack copy, stop: %v", len(pcs), len(data), u.Stop)
}
