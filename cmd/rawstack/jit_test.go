package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// The JIT tests record real runtimes (Debian's node and OpenJDK 17) whose
// time goes to one known function, and compare the share of samples that
// name it with perf's share on the same program: perf reads the same perf
// maps and jitdump files, at report time, so it is the oracle.

func needPerfEvents(t *testing.T) {
	t.Helper()
	testbuild.Feature(t, linux.Probe())
}

// jitRecord records argv (run by sh in dir) with extra record flags and
// returns the trace path and the recorded pid.
func jitRecord(t *testing.T, dir string, flags []string, argv ...string) (string, uint32) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "jit.rawstack")
	args := append([]string{"record", "-q", "-o", out, "-F", "999"}, flags...)
	sh := "cd " + shellQuote(dir) + " && exec"
	for _, a := range argv {
		sh += " " + shellQuote(a)
	}
	args = append(args, "--", "/bin/sh", "-c", sh)
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("record exited %d: %s", code, stderr.String())
	}
	r, err := format.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ev, err := r.Next()
	for err == nil && ev.Kind != format.KindProcess {
		ev, err = r.Next()
	}
	if err != nil {
		t.Fatalf("no Process event in %s: %v", out, err)
	}
	return out, ev.Process.Pid
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// foldedShare converts the trace to folded stacks and returns the share of
// samples with a frame containing sub (and frames containing each of also),
// and the sample count.
func foldedShare(t *testing.T, trace, sub string, also ...string) (float64, int64) {
	t.Helper()
	var all, hit int64
	eachFolded(t, trace, func(stack string, n int64) {
		all += n
		ok := strings.Contains(stack, sub)
		for _, a := range also {
			ok = ok && strings.Contains(stack, a)
		}
		if ok {
			hit += n
		}
	})
	if all == 0 {
		t.Fatal("no samples")
	}
	return float64(hit) / float64(all), all
}

// eachFolded converts the trace to folded stacks (root first,
// ";"-joined) and calls fn with each and its sample count.
func eachFolded(t *testing.T, trace string, fn func(stack string, n int64)) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"convert", trace, "--to", "folded", "--no-debuginfod"}, &stdout, &stderr); code != 0 {
		t.Fatalf("convert exited %d: %s", code, stderr.String())
	}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		sp := strings.LastIndexByte(line, ' ')
		n, err := strconv.ParseInt(line[sp+1:], 10, 64)
		if err != nil {
			t.Fatalf("folded line %q", line)
		}
		fn(line[:sp], n)
	}
}

// perfShare records argv with perf record -g (frame pointers, as rawstack's
// default) and returns the share of perf script's samples with a frame
// whose symbol contains sub. perf names JIT frames from the same files, at
// report time, so it must run before they are deleted.
func perfShare(t *testing.T, dir, sub string, argv ...string) (float64, int) {
	return perfShareWith(t, dir, sub, []string{"-g"}, argv...)
}

// perfShareWith is perfShare with other perf record call-graph flags.
func perfShareWith(t *testing.T, dir, sub string, graph []string, argv ...string) (float64, int) {
	t.Helper()
	perf := testbuild.Need(t, "perf", "perf is the oracle for JIT frame attribution")
	data := filepath.Join(t.TempDir(), "perf.data")
	rec := exec.Command(perf, append(append(append([]string{"record", "-q", "-F", "999"}, graph...), "-o", data, "--"), argv...)...)
	rec.Dir = dir
	if b, err := rec.CombinedOutput(); err != nil {
		t.Fatalf("perf record: %v\n%s", err, b)
	}
	script := exec.Command(perf, "script", "-i", data, "-F", "comm,tid,ip,sym")
	script.Dir = dir
	b, err := script.Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	var all, hit int
	for _, block := range strings.Split(string(b), "\n\n") {
		if strings.TrimSpace(block) == "" {
			continue
		}
		all++
		if strings.Contains(block, sub) {
			hit++
		}
	}
	if all == 0 {
		t.Fatal("perf recorded no samples")
	}
	// Leave no maps behind: the runtime perf ran (its child) wrote them too.
	for _, pid := range scriptPids(b) {
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", pid))
		os.Remove(filepath.Join(dir, fmt.Sprintf("jit-%d.dump", pid)))
	}
	return float64(hit) / float64(all), all
}

// scriptPids returns the thread ids in the header lines ("comm tid") of
// perf script -F comm,tid,... output; a process's main thread id is its pid.
func scriptPids(out []byte) []int {
	seen := map[int]bool{}
	var pids []int
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if pid, err := strconv.Atoi(f[len(f)-1]); err == nil && !seen[pid] {
			seen[pid] = true
			pids = append(pids, pid)
		}
	}
	return pids
}

// jitTraceStats returns the JIT events' count and encoded bytes (with the
// strings only they reference), the trace size, the earliest JITCode time
// and the sample times' median.
type jitStats struct {
	events, bytes, traceBytes int64
	firstJIT, medianSample    int64
	sources                   map[format.JITSource]int
	withLines                 int
}

func traceJITStats(t *testing.T, path string) jitStats {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := format.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st := jitStats{traceBytes: fi.Size(), firstJIT: -1, sources: map[format.JITSource]int{}}
	strSize := map[uint64]int64{}
	jitStr := map[uint64]bool{}
	otherStr := map[uint64]bool{}
	var times []int64
	var prevOff int64
	var prevKind format.Kind
	var prevID uint64
	account := func(end int64) {
		n := end - prevOff
		switch prevKind {
		case format.KindJITCode, format.KindJITUnload:
			st.bytes += n
		case format.KindString:
			strSize[prevID] = n
		}
	}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			account(fi.Size())
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Offset > prevOff && ev.Offset-prevOff < 1<<20 {
			account(ev.Offset)
		}
		prevOff, prevKind, prevID = ev.Offset, ev.Kind, ev.String.ID
		switch ev.Kind {
		case format.KindJITCode:
			st.events++
			st.sources[ev.JITCode.Source]++
			jitStr[ev.JITCode.Name] = true
			if len(ev.JITCode.Lines) > 0 {
				st.withLines++
			}
			for _, l := range ev.JITCode.Lines {
				jitStr[l.File] = true
			}
			if st.firstJIT < 0 || ev.JITCode.Time < st.firstJIT {
				st.firstJIT = ev.JITCode.Time
			}
		case format.KindJITUnload:
			st.events++
		case format.KindMarker:
			otherStr[ev.Marker.Name] = true
		case format.KindSample:
			times = append(times, ev.Sample.Time)
		}
	}
	for id := range jitStr {
		if !otherStr[id] {
			st.bytes += strSize[id]
		}
	}
	if len(times) > 0 {
		st.medianSample = times[len(times)/2]
	}
	return st
}

func (s jitStats) String() string {
	return fmt.Sprintf("%d JIT events, %d bytes with their strings, %.1f%% of the %d-byte trace", s.events, s.bytes, 100*float64(s.bytes)/float64(s.traceBytes), s.traceBytes)
}

// removeJITFiles deletes what the runtime left for pid, so that the trace
// is symbolized as on another machine: from its own events alone.
func removeJITFiles(t *testing.T, dir string, pid uint32) {
	t.Helper()
	for _, p := range []string{fmt.Sprintf("/tmp/perf-%d.map", pid), filepath.Join(dir, fmt.Sprintf("jit-%d.dump", pid))} {
		os.Remove(p)
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s still exists", p)
		}
	}
}

func jitAppDir(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("testdata", "jit", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// nodeRounds of fibJit(25) take about 3 CPU seconds, against node's
// start-up of 0.2 s (node 20) to 0.4 s (Debian's node 18, whose libnode
// is dynamically linked and whose builtins are compiled at start-up).
const nodeRounds = "4000"

// needNode returns the node to test: $RAWSTACK_TEST_NODE (a wrapper
// running another node build, e.g. Debian's node 18 next to NodeSource's
// node 20), else node on PATH.
func needNode(t *testing.T, why string) string {
	if n := os.Getenv("RAWSTACK_TEST_NODE"); n != "" {
		return n
	}
	return testbuild.Need(t, "node", why)
}

func TestJITNodePerfMap(t *testing.T) {
	needPerfEvents(t)
	node := needNode(t, "the Node JIT test records node --perf-basic-prof")
	dir := jitAppDir(t, "app.js")
	// Frame pointers, as perf record -g: the kernel's call chains.
	trace, pid := jitRecord(t, dir, []string{"--unwind", "fp"}, node, "--perf-basic-prof", "app.js", nodeRounds)
	st := traceJITStats(t, trace)
	removeJITFiles(t, dir, pid)
	ours, n := foldedShare(t, trace, "fibJit")
	theirs, pn := perfShare(t, dir, "fibJit", node, "--perf-basic-prof", "app.js", nodeRounds)
	t.Logf("fibJit named in %.1f%% of %d rawstack samples, %.1f%% of %d perf samples; %v", 100*ours, n, 100*theirs, pn, st)
	if st.sources[format.JITSourcePerfMap] == 0 {
		t.Errorf("no perf map entries recorded: %v", st.sources)
	}
	if ours < 0.80 {
		t.Errorf("fibJit in %.1f%% of the samples, want >= 80%%", 100*ours)
	}
	if d := ours - theirs; d < -0.10 || d > 0.10 {
		t.Errorf("rawstack %.1f%% vs perf %.1f%%: more than 10 points apart", 100*ours, 100*theirs)
	}
	// The kernel's frame-pointer chains go on through JIT code into node's
	// own frames (V8 keeps frame pointers in the code it generates).
	if through, _ := foldedShare(t, trace, "fibJit", "node::Start"); through < 0.75 {
		t.Errorf("only %.1f%% of the samples reach node::Start through fibJit", 100*through)
	}
	// Every export names the frame with the runtime's name and the [jit] pseudo-module.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"report", trace, "--top", "5", "--no-debuginfod"}, &stdout, &stderr); code != 0 {
		t.Fatalf("report: %s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "fibJit "+filepath.Join(dir, "app.js")) || !strings.Contains(stdout.String(), "[[jit] node]") {
		t.Errorf("report lacks the JIT frame or its module:\n%s", stdout.String())
	}
	prof := tracePprof(t, trace)
	found := false
	for _, l := range prof.Location {
		if l.Mapping != nil && l.Mapping.File == "[jit] node" && len(l.Line) > 0 && strings.Contains(l.Line[0].Function.Name, "fibJit") {
			found = true
		}
	}
	if !found {
		t.Error("pprof: no fibJit location in a \"[jit] node\" mapping")
	}
}

func TestJITNodeJitdump(t *testing.T) {
	needPerfEvents(t)
	node := needNode(t, "the Node jitdump test records node --perf-prof")
	dir := jitAppDir(t, "app.js")
	trace, pid := jitRecord(t, dir, nil, node, "--perf-prof", "app.js", nodeRounds) // record's default unwinding (auto)
	st := traceJITStats(t, trace)
	removeJITFiles(t, dir, pid)
	if st.sources[format.JITSourceJitdump] == 0 {
		t.Fatalf("no jitdump code loads recorded: %v", st.sources)
	}
	if st.withLines == 0 {
		t.Error("no jitdump debug info (lines) recorded")
	}
	ours, n := foldedShare(t, trace, "fibJit")
	t.Logf("jitdump: fibJit named in %.1f%% of %d samples; %v (%d with lines)", 100*ours, n, st, st.withLines)
	if ours < 0.80 {
		t.Errorf("fibJit in %.1f%% of the samples, want >= 80%%", 100*ours)
	}
}

// TestJITJavaMapAtExit records a JVM that writes its perf map only when it
// exits (-XX:+DumpPerfMapAtExit): every sample precedes the map, and the
// trace still names the hot method, after the map file is gone.
func TestJITJavaMapAtExit(t *testing.T) {
	needPerfEvents(t)
	java := testbuild.Need(t, "java", "the Java JIT test records OpenJDK 17 with -XX:+DumpPerfMapAtExit")
	class := testbuild.Build(t, testbuild.Cmd{Tool: "javac", Args: []string{"-d", "{dir}", "{in0}"}, Inputs: []string{"testdata/jit/HotJava.java"}, Out: "HotJava.class"})
	dir := filepath.Dir(class)
	// Frame pointers in compiled Java code (PreserveFramePointer) let the
	// kernel's call chains continue through it, as perf needs too; C2
	// would inline mixHotJava into main's loop, which dontinline prevents,
	// so that the method the test names owns its samples.
	argv := []string{java, "-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit", "-XX:+PreserveFramePointer",
		"-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,HotJava::mixHotJava", "-cp", dir, "HotJava", "8000"}
	trace, pid := jitRecord(t, t.TempDir(), []string{"--unwind", "fp"}, argv...)
	st := traceJITStats(t, trace)
	removeJITFiles(t, dir, pid)
	if st.sources[format.JITSourcePerfMap] == 0 {
		t.Fatalf("no perf map entries recorded: %v", st.sources)
	}
	if st.firstJIT < st.medianSample {
		t.Errorf("a JIT entry at %d, before the median sample at %d: the map was not written only at exit", st.firstJIT, st.medianSample)
	}
	ours, n := foldedShare(t, trace, "HotJava.mixHotJava(long)")
	theirs, pn := perfShare(t, t.TempDir(), "HotJava.mixHotJava(long)", argv...)
	t.Logf("mixHotJava named in %.1f%% of %d rawstack samples, %.1f%% of %d perf samples; %v", 100*ours, n, 100*theirs, pn, st)
	if ours < 0.70 {
		t.Errorf("mixHotJava in %.1f%% of the samples, want >= 70%%", 100*ours)
	}
	if d := ours - theirs; d < -0.10 || d > 0.10 {
		t.Errorf("rawstack %.1f%% vs perf %.1f%%: more than 10 points apart", 100*ours, 100*theirs)
	}
}

// TestJITNodeDWARF: in DWARF mode, JIT code has no CFI, and the unwinder
// follows frame pointers there and CFI again in node's own code, both
// online (on the host) and offline (--keep-raw, unwound by report).
func TestJITNodeDWARF(t *testing.T) {
	needPerfEvents(t)
	node := needNode(t, "the Node DWARF-mode test records node --perf-basic-prof")
	dir := jitAppDir(t, "app.js")
	for _, mode := range [][]string{{"--unwind", "dwarf"}, {"--unwind", "dwarf", "--keep-raw"}} {
		t.Run(strings.TrimPrefix(mode[len(mode)-1], "--"), func(t *testing.T) {
			trace, pid := jitRecord(t, dir, mode, node, "--perf-basic-prof", "app.js", nodeRounds)
			removeJITFiles(t, dir, pid)
			named, n := foldedShare(t, trace, "fibJit")
			through, _ := foldedShare(t, trace, "fibJit", "node::Start")
			t.Logf("%v: fibJit in %.1f%% of %d samples, %.1f%% reach node::Start through it", mode, 100*named, n, 100*through)
			if named < 0.80 || through < 0.75 {
				t.Errorf("fibJit in %.1f%% of the samples (want >= 80%%), %.1f%% through to node::Start (want >= 75%%)", 100*named, 100*through)
			}
		})
	}
}

// python312 returns a Python with the perf trampoline (3.12 or later):
// $RAWSTACK_TEST_PYTHON, else python3.13 or python3.12 on PATH, else
// pyenv's 3.13 or 3.12 (under $PYENV_ROOT, `pyenv root` or ~/.pyenv).
// Debian 12 ships 3.11, which has none.
func python312(t *testing.T) string {
	cands := []string{os.Getenv("RAWSTACK_TEST_PYTHON"), "python3.13", "python3.12"}
	cands = append(cands, pyenvPythons()...)
	cands = append(cands, "python3")
	for _, c := range cands {
		if c == "" {
			continue
		}
		p, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		if exec.Command(p, "-X", "perf", "-c", "import sys; sys.exit(0 if sys.is_stack_trampoline_active() else 1)").Run() == nil {
			return p
		}
	}
	testbuild.Skip(t, "no Python >= 3.12 with the perf trampoline on PATH or under pyenv (set RAWSTACK_TEST_PYTHON; Debian 12 has 3.11)")
	return ""
}

// pyenvPythons lists the python3.13 and python3.12 binaries of pyenv's
// installed versions, newest first.
func pyenvPythons() []string {
	var roots []string
	roots = append(roots, os.Getenv("PYENV_ROOT"))
	if out, err := exec.Command("pyenv", "root").Output(); err == nil {
		roots = append(roots, strings.TrimSpace(string(out)))
	}
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(home, ".pyenv"))
	}
	var found []string
	for _, root := range roots {
		if root == "" {
			continue
		}
		for _, v := range []string{"3.13", "3.12"} {
			m, _ := filepath.Glob(filepath.Join(root, "versions", v+"*", "bin", "python"+v))
			sort.Sort(sort.Reverse(sort.StringSlice(m)))
			found = append(found, m...)
		}
	}
	return found
}

// TestJITPythonTrampoline records Python 3.12's perf trampoline (-X perf):
// CPython is built without frame pointers, so only DWARF mode reaches the
// trampolines, through libpython's CFI; the trampolines keep frame
// pointers and have no CFI, where the unwinder falls back to them.
func TestJITPythonTrampoline(t *testing.T) {
	needPerfEvents(t)
	py := python312(t)
	dir := jitAppDir(t, "hot.py")
	argv := []string{py, "-X", "perf", "hot.py", "300"}
	trace, pid := jitRecord(t, dir, []string{"--unwind", "dwarf"}, argv...)
	st := traceJITStats(t, trace)
	removeJITFiles(t, dir, pid)
	ours, n := foldedShare(t, trace, "py::hot_py:")
	theirs, pn := perfShareWith(t, dir, "py::hot_py:", []string{"--call-graph", "dwarf"}, argv...)
	t.Logf("hot_py named in %.1f%% of %d rawstack samples (--unwind dwarf), %.1f%% of %d perf samples (--call-graph dwarf); %v", 100*ours, n, 100*theirs, pn, st)
	if ours < 0.80 {
		t.Errorf("hot_py in %.1f%% of the samples, want >= 80%%", 100*ours)
	}
	if d := ours - theirs; d < -0.10 || d > 0.10 {
		t.Errorf("rawstack %.1f%% vs perf %.1f%%: more than 10 points apart", 100*ours, 100*theirs)
	}
}

// TestJITNodeAttach attaches to a running node whose perf map already
// holds its code: the map is read from the start, then tailed.
func TestJITNodeAttach(t *testing.T) {
	needPerfEvents(t)
	node := needNode(t, "the attach test records a running node --perf-basic-prof")
	dir := jitAppDir(t, "app.js")
	cmd := exec.Command(node, "--perf-basic-prof", "app.js", "100000")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		removeJITFiles(t, dir, uint32(cmd.Process.Pid))
	}()
	// Wait until fibJit is optimized: its map line is written then.
	mapPath := fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid)
	for i := 0; ; i++ {
		if b, _ := os.ReadFile(mapPath); bytes.Contains(b, []byte("*fibJit")) {
			break
		}
		if i == 300 {
			t.Fatal("node wrote no map line for the optimized fibJit in 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	trace := filepath.Join(t.TempDir(), "attach.rawstack")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"record", "-q", "-o", trace, "-F", "999", "-p", strconv.Itoa(cmd.Process.Pid), "--duration", "1s"}, &stdout, &stderr); code != 0 {
		t.Fatalf("record: %s", stderr.String())
	}
	cmd.Process.Kill()
	cmd.Wait()
	removeJITFiles(t, dir, uint32(cmd.Process.Pid))
	share, n := foldedShare(t, trace, "fibJit")
	t.Logf("attached: fibJit named in %.1f%% of %d samples", 100*share, n)
	if share < 0.80 {
		t.Errorf("fibJit in %.1f%% of the samples, want >= 80%%", 100*share)
	}
}

// TestJITHintWithoutMaps: node run without --perf-basic-prof leaves its
// JIT code unnamed, and report says how to name it.
func TestJITHintWithoutMaps(t *testing.T) {
	needPerfEvents(t)
	node := needNode(t, "the hint test records node without its perf map")
	dir := jitAppDir(t, "app.js")
	trace, _ := jitRecord(t, dir, []string{"--unwind", "fp"}, node, "app.js", "1500")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"report", trace, "--top", "3", "--no-debuginfod"}, &stdout, &stderr); code != 0 {
		t.Fatalf("report: %s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "node --perf-basic-prof") {
		t.Errorf("no hint about JIT maps:\n%s\n%s", stderr.String(), stdout.String())
	}
	t.Log(strings.TrimSpace(stderr.String()))
}
