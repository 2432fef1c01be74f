package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// The V8 tests record node with no flag and name its JavaScript frames
// from V8's own metadata (platform/linux/v8). shop.js's hot chain is
// handle → total (an arrow function) → Price.mix (a class method), which
// TurboFan inlines into the script's top level: perf maps name only that
// top level, V8's own sampler (--cpu-prof) the whole chain.

// shopRounds of shop.js take about 1.3 s of CPU on the test VM, against
// node's 0.1 s start-up.
const shopRounds = "3000000"

// jsFrame is one frame of a sample as the pprof export gives it.
type jsFrame struct {
	fn, file string
	line     int64
	v8       bool // in the [v8] pseudo-module: named from V8's metadata
	hotspot  bool // in the [hotspot] pseudo-module: named from HotSpot's tables
	anon     bool // anonymous code no one named
}

// pprofFrames converts trace to pprof and returns each sample's frames,
// leaf first, with its count.
func pprofFrames(t *testing.T, trace string) ([][]jsFrame, []int64) {
	t.Helper()
	prof := tracePprof(t, trace)
	var stacks [][]jsFrame
	var counts []int64
	for _, s := range prof.Sample {
		var fs []jsFrame
		for _, l := range s.Location {
			m := ""
			if l.Mapping != nil {
				m = l.Mapping.File
			}
			if len(l.Line) == 0 {
				fs = append(fs, jsFrame{anon: m == "" || strings.HasPrefix(m, "//anon") || strings.HasPrefix(m, "[anon")})
				continue
			}
			for _, ln := range l.Line {
				fs = append(fs, jsFrame{fn: ln.Function.Name, file: ln.Function.Filename, line: ln.Line, v8: m == "[v8]", hotspot: m == "[hotspot]"})
			}
		}
		stacks = append(stacks, fs)
		counts = append(counts, s.Value[0])
	}
	return stacks, counts
}

// tracePprof converts trace to pprof and parses it.
func tracePprof(t *testing.T, trace string) *profile.Profile {
	t.Helper()
	pp := filepath.Join(t.TempDir(), "p.pb.gz")
	var stdout, stderr strings.Builder
	if code := run([]string{"convert", trace, "--to", "pprof", "-o", pp, "--no-debuginfod"}, &stdout, &stderr); code != 0 {
		t.Fatalf("convert: %s", stderr.String())
	}
	f, err := os.Open(pp)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prof, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return prof
}

// shopStats are the figures of a recording of shop.js.
type shopStats struct {
	busy, named, chain int64
	leaf               map[string]int64 // innermost shop.js function of the samples in the script
	lines              map[int]int64    // and its line
	inScript           int64
}

func (s shopStats) String() string {
	return fmt.Sprintf("%d busy samples: JavaScript named in %d (%.1f%%), chain in %d (%.1f%%); innermost shop.js function %v of %d",
		s.busy, s.named, 100*float64(s.named)/float64(s.busy), s.chain, 100*float64(s.chain)/float64(s.busy), s.leaf, s.inScript)
}

// shopShares reads a recording of shop.js (in dir): busy samples are
// those running JavaScript (through V8's JSEntry builtin); their
// JavaScript is named when every frame of anonymous code was named from
// V8's metadata; the chain is mix, total, handle and the script's top
// level, one after the other.
func shopShares(t *testing.T, trace, dir string) shopStats {
	t.Helper()
	script := filepath.Join(dir, "shop.js")
	stacks, counts := pprofFrames(t, trace)
	st := shopStats{leaf: map[string]int64{}, lines: map[int]int64{}}
	for i, fs := range stacks {
		js, anon, v8 := false, false, false
		for _, f := range fs {
			js = js || f.fn == "Builtins_JSEntry"
			anon = anon || f.anon
			v8 = v8 || f.v8
		}
		if !js {
			continue
		}
		n := counts[i]
		st.busy += n
		if v8 && !anon {
			st.named += n
		}
		var own []string
		for _, f := range fs {
			if f.v8 && f.file == script {
				if len(own) == 0 {
					st.lines[int(f.line)] += n
				}
				own = append(own, f.fn)
			}
		}
		if len(own) > 0 {
			st.inScript += n
			st.leaf[own[0]] += n
		}
		if strings.Contains(strings.Join(own, ";"), "mix;total;handle;(anonymous)") {
			st.chain += n
		}
	}
	if st.busy == 0 {
		t.Fatal("no sample ran JavaScript")
	}
	return st
}

// shopFunction returns the function of shop.js that holds line (1-based):
// the ranges of testdata/jit/shop.js.
func shopFunction(line int) string {
	switch {
	case line >= 7 && line <= 11:
		return "mix"
	case line >= 14 && line <= 18:
		return "total"
	case line == 19:
		return "handle"
	}
	return "(anonymous)"
}

// cpuProfShares runs shop.js under node --cpu-prof and returns the share
// of its samples in each shop.js function, among the samples in shop.js.
// V8's sampler attributes a sample in code TurboFan inlined to the
// function compiled, but at the line of the pc's source position, which
// is in the inlined function: its per-line ticks (positionTicks) give
// each function's share with inlined code counted where it belongs.
func cpuProfShares(t *testing.T, node, dir string) (map[string]float64, map[int]float64, int) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(node, "--cpu-prof", "--cpu-prof-dir", out, "--cpu-prof-interval", "1000", "shop.js", shopRounds)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node --cpu-prof: %v\n%s", err, b)
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.cpuprofile"))
	if len(files) != 1 {
		t.Fatalf("node --cpu-prof wrote %d profiles", len(files))
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Nodes []struct {
			CallFrame struct {
				URL string `json:"url"`
			} `json:"callFrame"`
			PositionTicks []struct {
				Line  int `json:"line"`
				Ticks int `json:"ticks"`
			} `json:"positionTicks"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	counts, lines := map[string]int{}, map[int]int{}
	all := 0
	for _, n := range p.Nodes {
		if !strings.HasSuffix(n.CallFrame.URL, "/shop.js") {
			continue
		}
		for _, pt := range n.PositionTicks {
			counts[shopFunction(pt.Line)] += pt.Ticks
			lines[pt.Line] += pt.Ticks
			all += pt.Ticks
		}
	}
	if all == 0 {
		t.Fatal("--cpu-prof: no sample in shop.js")
	}
	shares, lineShares := map[string]float64{}, map[int]float64{}
	for fn, n := range counts {
		shares[fn] = float64(n) / float64(all)
	}
	for l, n := range lines {
		lineShares[l] = float64(n) / float64(all)
	}
	return shares, lineShares, all
}

// TestJITNodeNoFlag records node with no flag: V8's metadata names its
// JavaScript frames in both tiers, expands what TurboFan inlined, and
// agrees with V8's own sampler on where the time goes.
func TestJITNodeNoFlag(t *testing.T) {
	needPerfEvents(t)
	node := needNode(t, "the V8 test records node")
	dir := jitAppDir(t, "shop.js")
	theirs, theirLines, n := cpuProfShares(t, node, dir)
	t.Logf("--cpu-prof: %v of %d samples in shop.js, by line %v", theirs, n, theirLines)
	for _, mode := range []string{"auto", "dwarf", "keep-raw", "ebpf"} {
		t.Run(mode, func(t *testing.T) {
			flags := []string{"--unwind", mode}
			switch mode {
			case "keep-raw": // RawStack events, unwound at convert time
				flags = []string{"--unwind", "dwarf", "--keep-raw"}
			case "ebpf":
				testbuild.Feature(t, linux.ProbeBPF())
				flags = []string{"--backend", "ebpf"}
			}
			trace, _ := jitRecord(t, dir, flags, node, "shop.js", shopRounds)
			st := shopShares(t, trace, dir)
			t.Logf("%v; by line %v", st, st.lines)
			// The 95% in every mode: the eBPF back end gave
			// 90.9–95.5% while it read its ring every 100 ms (code V8
			// replaced by then left frames anonymous), 99.2–99.6%
			// reading it every 10 ms while it names a runtime's frames.
			checkShop(t, st, 0.95)
			for _, fn := range []string{"mix", "total", "handle", "(anonymous)"} {
				ours := float64(st.leaf[fn]) / float64(st.inScript)
				if tol := shareTolerance(ours, int(st.inScript), theirs[fn], n); math.Abs(ours-theirs[fn]) > tol {
					t.Errorf("%s: %.3f of rawstack's samples in shop.js, %.3f of --cpu-prof's (tolerance %.3f)", fn, ours, theirs[fn], tol)
				}
			}
			if float64(st.lines[0]) > 0.5*float64(st.inScript) {
				// The script's source could not be read as it stood
				// (moved by the garbage collector and its old copy
				// reused before the reader met it): lines unknown,
				// never wrong. A wrong line fails below (every line
				// was 1 in about one run in ten, before the reader
				// told an unreadable type from V8's type 0 and followed
				// moved objects).
				t.Logf("%d of %d samples in shop.js without a line (the script's source unreadable): per-line shares not compared", st.lines[0], st.inScript)
				return
			}
			for line := 1; line <= 24; line++ {
				ours := float64(st.lines[line]) / float64(st.inScript)
				if tol := shareTolerance(ours, int(st.inScript), theirLines[line], n); math.Abs(ours-theirLines[line]) > tol {
					t.Errorf("shop.js:%d: %.3f of rawstack's samples in shop.js, %.3f of --cpu-prof's (tolerance %.3f)", line, ours, theirLines[line], tol)
				}
			}
		})
	}
}

// checkShop holds a recording of shop.js to the figures.
func checkShop(t *testing.T, st shopStats, minNamed float64) {
	t.Helper()
	if named := float64(st.named) / float64(st.busy); named < minNamed {
		t.Errorf("JavaScript named in %.1f%% of the busy samples, want >= %.0f%%", 100*named, 100*minNamed)
	}
	if chain := float64(st.chain) / float64(st.busy); chain < 0.85 {
		t.Errorf("the whole chain named in %.1f%% of the busy samples, want >= 85%%", 100*chain)
	}
}

// shareTolerance is 0.05, or three standard deviations of the
// difference of two binomial shares when that is larger.
func shareTolerance(p1 float64, n1 int, p2 float64, n2 int) float64 {
	sd := math.Sqrt(p1*(1-p1)/float64(n1) + p2*(1-p2)/float64(n2))
	return math.Max(0.05, 3*sd)
}

// TestJITNodePerfMapAgrees records node with --perf-basic-prof: the frames
// V8's metadata names and perf's map names for the same code must be the
// same function (the map names the code object, so its function is the
// outermost of the frames inlined there), and the metadata's names win.
func TestJITNodePerfMapAgrees(t *testing.T) {
	needPerfEvents(t)
	node := needNode(t, "the V8 test records node --perf-basic-prof")
	dir := jitAppDir(t, "shop.js")
	trace, pid := jitRecord(t, dir, nil, node, "--perf-basic-prof", "shop.js", shopRounds)
	removeJITFiles(t, dir, pid)
	agree, differ, unmapped := perfMapAgreement(t, trace)
	t.Logf("compiled frames named by both: %d agree, %d differ; %d not in the map", agree, differ, unmapped)
	if agree == 0 || differ > agree/100 {
		t.Errorf("%d of %d compiled frames name another function than the perf map", differ, agree+differ)
	}
	st := shopStats{}
	st = shopShares(t, trace, dir)
	t.Log(st)
	checkShop(t, st, 0.95)
}

// perfMapAgreement compares, sample by sample, the function V8's
// metadata gave each compiled frame (the outermost of a native frame's
// group) with the perf map entry covering its address ("JS:*mix
// /srv/shop.js:7:6").
func perfMapAgreement(t *testing.T, trace string) (agree, differ, unmapped int) {
	t.Helper()
	r, err := format.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	type entry struct {
		addr, size uint64
		name       uint64
	}
	strs := map[uint64]string{}
	var maps []entry
	funcs := map[uint64]format.JITFunc{}
	stacks := map[uint64][]format.JITFrame{}
	uses := map[uint64]int{}
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		switch ev.Kind {
		case format.KindString:
			strs[ev.String.ID] = ev.String.Value
		case format.KindJITCode:
			maps = append(maps, entry{ev.JITCode.Addr, ev.JITCode.Size, ev.JITCode.Name})
		case format.KindJITFunc:
			funcs[ev.JITFunc.ID] = ev.JITFunc
		case format.KindPyStack:
			if len(ev.PyStack.JIT) > 0 {
				stacks[ev.PyStack.ID] = append([]format.JITFrame(nil), ev.PyStack.JIT...)
			}
		case format.KindSample:
			uses[ev.Sample.Python]++
		}
	}
	for id, fs := range stacks {
		for i, f := range fs {
			if f.Inlined || f.Tier == format.JITTierInterpreted {
				continue // an interpreted frame's pc is the shared trampoline's
			}
			_ = i
			var name string
			for _, m := range maps {
				if f.PC >= m.addr && f.PC < m.addr+m.size {
					name = strs[m.name]
				}
			}
			if name == "" {
				unmapped += uses[id]
				continue
			}
			fn := funcs[f.Func]
			want := mapFunction(name)
			if want == fn.Name+" "+fn.File {
				agree += uses[id]
			} else {
				differ += uses[id]
				t.Logf("%#x: perf map %q, V8's metadata %q %q", f.PC, name, fn.Name, fn.File)
			}
		}
	}
	return agree, differ, unmapped
}

// mapFunction turns a perf map name ("JS:*mix /srv/shop.js:7:6", "JS:*
// /srv/shop.js:1:1") into "mix /srv/shop.js" ("(anonymous) /srv/shop.js").
func mapFunction(name string) string {
	name = strings.TrimPrefix(name, "JS:")
	name = strings.TrimLeft(name, "*^~+")
	fn, file, _ := strings.Cut(name, " ")
	if i := strings.LastIndexByte(file, ':'); i > 0 {
		file = file[:i]
		if i := strings.LastIndexByte(file, ':'); i > 0 {
			file = file[:i]
		}
	}
	if fn == "" {
		fn = "(anonymous)"
	}
	return fn + " " + file
}

// TestSnapshotNode snapshots node blocked three JavaScript calls deep (in
// Atomics.wait, under libc's futex wait, which keeps no frame pointer):
// the main thread's JavaScript frames must be those V8's own Error.stack
// printed at the same line, function for function, line for line.
func TestSnapshotNode(t *testing.T) {
	cmd, want := startWaitJS(t)
	var stdout, stderr strings.Builder
	if code := run([]string{"snapshot", "-p", strconv.Itoa(cmd.Process.Pid)}, &stdout, &stderr); code != 0 {
		t.Fatalf("snapshot: %s", stderr.String())
	}
	checkWaitJS(t, stdout.String(), cmd.Process.Pid, want)
}

// TestSnapshotNodeCore is TestSnapshotNode on a core of the same program
// written by gdb's gcore while it waited: snapshot --core names the
// JavaScript frames from V8's metadata in the memory the core holds, as
// in the live process.
func TestSnapshotNodeCore(t *testing.T) {
	gcore := testbuild.Need(t, "gcore", "gdb's gcore writes the core of a running node")
	cmd, want := startWaitJS(t)
	prefix := filepath.Join(t.TempDir(), "core")
	pid := cmd.Process.Pid
	if b, err := exec.Command(gcore, "-o", prefix, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		t.Fatalf("gcore: %v\n%s", err, b)
	}
	cmd.Process.Kill() // the core alone now
	var stdout, stderr strings.Builder
	if code := run([]string{"snapshot", "--core", prefix + "." + strconv.Itoa(pid)}, &stdout, &stderr); code != 0 {
		t.Fatalf("snapshot --core: %s", stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("snapshot --core: %s", stderr.String())
	}
	checkWaitJS(t, stdout.String(), pid, want)
}

// startWaitJS starts wait.js, which prints V8's own stack of the line
// where it then waits in Atomics.wait, and returns the process and that
// stack ("/dir/wait.js:5", ..., the first node: internal frame
// "node:internal/main/run_main_module:28"), once it waits.
func startWaitJS(t *testing.T) (*exec.Cmd, []string) {
	node := needNode(t, "the V8 snapshot test runs node")
	dir := jitAppDir(t, "wait.js")
	cmd := exec.Command(node, "wait.js")
	cmd.Dir = dir
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// V8's stack: "    at c (/dir/wait.js:5:37)", "    at node:internal/main/run_main_module:28:49".
	var want []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "Error" {
			continue
		}
		at, ok := strings.CutPrefix(line, "at ")
		if !ok {
			break
		}
		if i := strings.LastIndexByte(at, '('); i >= 0 {
			at = strings.TrimSuffix(at[i+1:], ")")
		}
		at = at[:strings.LastIndexByte(at, ':')] // drop the column
		want = append(want, at)
		if strings.Contains(at, "run_main_module") {
			break
		}
	}
	if len(want) < 5 {
		t.Fatalf("node printed no stack: %v", want)
	}
	time.Sleep(100 * time.Millisecond) // from printing into Atomics.wait
	return cmd, want
}

// checkWaitJS checks the main thread of a snapshot of wait.js: its
// JavaScript frames are V8's stack want, and the script's are named c b
// a (anonymous).
func checkWaitJS(t *testing.T, out string, pid int, want []string) {
	t.Helper()
	// The main thread's frames: "#7  0x00000000018cfd1c c (/dir/wait.js:5)".
	var got, names []string
	main := false
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "TID ") {
			main = line == "TID "+strconv.Itoa(pid)+":"
			continue
		}
		f := strings.Fields(line)
		if !main || len(f) < 4 || !strings.HasPrefix(f[0], "#") || !strings.HasPrefix(f[len(f)-1], "(") {
			continue
		}
		loc := strings.TrimSuffix(strings.TrimPrefix(f[len(f)-1], "("), ")")
		if !strings.Contains(loc, "wait.js:") && !strings.HasPrefix(loc, "node:") {
			continue
		}
		got = append(got, loc)
		names = append(names, f[2])
	}
	t.Logf("Error.stack: %v\nsnapshot: %v %v", want, got, names)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("snapshot's JavaScript frames %v, V8's Error.stack %v\n%s", got, want, out)
	}
	if len(names) < 4 || strings.Join(names[:4], " ") != "c b a (anonymous)" {
		t.Errorf("snapshot names the script's frames %v, want c b a (anonymous)", names)
	}
}

// TestJITNodeAttachAtStart attaches to node (no flag) in its first
// milliseconds, when V8 is mapping its code space: a mapping made after
// the recorder read the process's maps but before its events were
// enabled has no mmap record, and every JavaScript frame in it stayed an
// unnamed address (1 attach in 3 at 50 ms before the late mappings were
// read again). Three attaches, at 0, 20 and 50 ms.
func TestJITNodeAttachAtStart(t *testing.T) {
	needPerfEvents(t)
	node := needNode(t, "the attach test records node")
	dir := jitAppDir(t, "app.js")
	for _, delay := range []time.Duration{0, 20 * time.Millisecond, 50 * time.Millisecond} {
		prog := exec.Command(node, filepath.Join(dir, "app.js"), "100000")
		if err := prog.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		trace := filepath.Join(t.TempDir(), "t.rawstack")
		var stdout, stderr bytes.Buffer
		args := []string{"record", "-q", "-F", "499", "-o", trace, "-p", strconv.Itoa(prog.Process.Pid), "--duration", "700ms"}
		code := run(args, &stdout, &stderr)
		prog.Process.Kill()
		prog.Wait()
		if code != 0 {
			t.Fatalf("%q exited %d: %s", args, code, stderr.String())
		}
		share, n := foldedShare(t, trace, "fibJit")
		t.Logf("attached after %v: fibJit named in %.1f%% of %d samples", delay, 100*share, n)
		// node's own start-up (its first ~0.1 s, no fibJit) is in the
		// recording; the defect gave 0-0.3%.
		if share < 0.6 {
			t.Errorf("attached after %v: fibJit named in %.1f%% of the samples, want >= 60%%", delay, 100*share)
		}
	}
}
