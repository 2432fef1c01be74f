package main

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux"
)

// The HotSpot tests record Java 17 with no flag and name its Java frames
// from the VM's own serviceability tables (platform/linux/hotspot).
// Shop.java's hot chain is Shop.handle → Cart.total → a lambda →
// Price.mix, which C2 inlines into one compiled method (Shop.main's loop):
// a perf map names only that method; JFR, the VM's own sampler, the whole
// chain.

// shopChain is Shop.java's hot chain, innermost first, as both rawstack
// and JFR name it (the lambda's hidden class, whose frames JFR and
// jstack hide, rawstack hides too).
const shopChain = "Shop$Price.mix;Shop.lambda$handle$0;Shop$Cart.total;Shop.handle;Shop.main"

// shopJava compiles Shop.java and returns its class directory.
func shopJava(t *testing.T) (java, dir string) {
	t.Helper()
	java = testbuild.Need(t, "java", "the HotSpot test records OpenJDK 17")
	class := testbuild.Build(t, testbuild.Cmd{Tool: "javac", Args: []string{"-d", "{dir}", "{in0}"}, Inputs: []string{"testdata/jit/Shop.java"}, Out: "Shop.class"})
	return java, filepath.Dir(class)
}

// javaShares reads a recording of Shop: busy samples are the main
// thread's (JavaMain's) samples running Java (through
// JavaCalls::call_helper); their Java is named when some frame was named
// from HotSpot's tables and no frame is anonymous code; the chain is
// shopChain, in order.
func javaShares(t *testing.T, trace string) shopStats {
	t.Helper()
	stacks, counts := pprofFrames(t, trace)
	st := shopStats{leaf: map[string]int64{}, lines: map[int]int64{}}
	for i, fs := range stacks {
		for _, f := range fs {
			// A hidden class's method (the lambda's proxy) is left out,
			// as jstack and JFR leave it out.
			if f.hotspot && strings.Contains(f.fn, "$$Lambda") {
				t.Errorf("a hidden method's frame %s in %d samples", f.fn, counts[i])
			}
		}
		main, java, anon, hs := false, false, false, false
		for _, f := range fs {
			main = main || f.fn == "JavaMain"
			java = java || strings.HasPrefix(f.fn, "JavaCalls::call_helper")
			anon = anon || f.anon
			hs = hs || f.hotspot
		}
		if !main || !java {
			continue
		}
		n := counts[i]
		st.busy += n
		if hs && !anon {
			st.named += n
		}
		var own []string
		for _, f := range fs {
			if f.hotspot && f.file == "Shop.java" {
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
		if strings.HasPrefix(strings.Join(own, ";"), shopChain) {
			st.chain += n
		}
	}
	if st.busy == 0 {
		t.Fatal("no sample of the main thread ran Java")
	}
	return st
}

// jfrShares reads JFR's execution samples in file and returns the share
// of each innermost Shop.java method among the samples in Shop.java, and
// the share of samples whose stack holds shopChain.
func jfrShares(t *testing.T, file string) (map[string]float64, float64, int) {
	t.Helper()
	jfr := testbuild.Need(t, "jfr", "JFR is the HotSpot test's oracle")
	out, err := exec.Command(jfr, "print", "--events", "jdk.ExecutionSample", file).Output()
	if err != nil {
		t.Fatalf("jfr print: %v", err)
	}
	counts := map[string]int{}
	all, chain := 0, 0
	var stack []string
	in := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(l, "stackTrace = ["):
			in, stack = true, stack[:0]
		case in && (l == "]" || l == "..."):
			in = false
			var own []string
			for _, f := range stack {
				if strings.HasPrefix(f, "Shop.") || strings.HasPrefix(f, "Shop$") && !strings.HasPrefix(f, "Shop$$Lambda") {
					own = append(own, f)
				}
			}
			if len(own) > 0 {
				all++
				counts[own[0]]++
				if strings.HasPrefix(strings.Join(own, ";"), shopChain) {
					chain++
				}
			}
		case in:
			if i := strings.IndexByte(l, '('); i > 0 {
				stack = append(stack, l[:i])
			}
		}
	}
	if all == 0 {
		t.Fatalf("JFR: no sample in Shop.java (%d bytes of output)", len(out))
	}
	shares := map[string]float64{}
	for fn, n := range counts {
		shares[fn] = float64(n) / float64(all)
	}
	return shares, float64(chain) / float64(all), all
}

// TestJITJavaNoFlag records a JVM started with no flag: HotSpot's tables
// name its Java frames in the interpreter, C1 and C2, expand what C2
// inlined, and, in a run with JFR on, agree with JFR on where the time
// goes.
func TestJITJavaNoFlag(t *testing.T) {
	needPerfEvents(t)
	java, dir := shopJava(t)
	for _, mode := range []string{"auto", "dwarf", "ebpf", "jfr"} {
		t.Run(mode, func(t *testing.T) {
			flags := []string{"--unwind", mode}
			argv := []string{java, "-cp", dir, "Shop", "3"}
			jfrFile := filepath.Join(t.TempDir(), "shop.jfr")
			if mode == "ebpf" {
				testbuild.Feature(t, linux.ProbeBPF())
				flags = []string{"--backend", "ebpf"}
			}
			if mode == "jfr" {
				// The oracle, in the same run: JFR's sampler every 10 ms
				// (its "profile" settings). It does not change what C2
				// records (DebugNonSafepoints stays off).
				flags = []string{"--unwind", "auto"}
				argv = []string{java, "-XX:StartFlightRecording=settings=profile,filename=" + jfrFile, "-cp", dir, "Shop", "3"}
			}
			trace, _ := jitRecord(t, t.TempDir(), flags, argv...)
			st := javaShares(t, trace)
			t.Logf("%v; by line %v", st, st.lines)
			if mode != "jfr" {
				checkJava(t, st)
				return
			}
			theirs, theirChain, n := jfrShares(t, jfrFile)
			ourChain := float64(st.chain) / float64(st.inScript)
			t.Logf("JFR: innermost Shop.java method %v, whole chain %.3f, of %d samples", theirs, theirChain, n)
			for _, fn := range []string{"Shop$Price.mix", "Shop.lambda$handle$0", "Shop$Cart.total", "Shop.handle", "Shop.main"} {
				ours := float64(st.leaf[fn]) / float64(st.inScript)
				if tol := shareTolerance(ours, int(st.inScript), theirs[fn], n); math.Abs(ours-theirs[fn]) > tol {
					t.Errorf("%s: %.3f of rawstack's samples in Shop.java, %.3f of JFR's (tolerance %.3f)", fn, ours, theirs[fn], tol)
				}
			}
			if tol := shareTolerance(ourChain, int(st.inScript), theirChain, n); math.Abs(ourChain-theirChain) > tol {
				t.Errorf("whole chain: %.3f of rawstack's samples in Shop.java, %.3f of JFR's (tolerance %.3f)", ourChain, theirChain, tol)
			}
		})
	}
}

// checkJava holds a recording of Shop to the figures.
func checkJava(t *testing.T, st shopStats) {
	t.Helper()
	if named := float64(st.named) / float64(st.busy); named < 0.95 {
		t.Errorf("Java named in %.1f%% of the busy samples, want >= 95%%", 100*named)
	}
	if chain := float64(st.chain) / float64(st.busy); chain < 0.80 {
		t.Errorf("the whole chain named in %.1f%% of the busy samples, want >= 80%%", 100*chain)
	}
}

// TestSnapshotJava holds snapshot -p of a JVM with 20 threads blocked
// three calls deep (Shop.serve → hold → park → Object.wait) to jstack,
// the JVM's own view: every thread jstack shows with Java frames has the
// same top three, names and lines (a native method's line is jstack's
// "Native Method", 0 here).
func TestSnapshotJava(t *testing.T) {
	java, dir := shopJava(t)
	jstack := testbuild.Need(t, "jstack", "jstack is the Java snapshot test's oracle")
	cmd := startShopWait(t, exec.Command(java, "-cp", dir, "Shop", "wait", "20"))
	pid := strconv.Itoa(cmd.Process.Pid)
	var stdout, stderr strings.Builder
	if code := run([]string{"snapshot", "-p", pid}, &stdout, &stderr); code != 0 {
		t.Fatalf("snapshot: %s", stderr.String())
	}
	checkJavaSnapshot(t, stdout.String(), jstackFrames(t, jstack, pid))
}

// TestSnapshotJavaCore is TestSnapshotJava on a core of the same JVM,
// written by gdb's gcore after jstack read the live threads: snapshot
// --core names the Java frames from HotSpot's tables in the memory the
// core holds, and they must be jstack's.
func TestSnapshotJavaCore(t *testing.T) {
	java, dir := shopJava(t)
	jstack := testbuild.Need(t, "jstack", "jstack is the Java snapshot test's oracle")
	gcore := testbuild.Need(t, "gcore", "gdb's gcore writes the core of a running JVM")
	// gcore writes reserved memory too, as zeros: with the defaults here
	// the core is 8.6 GB and takes 38 s (a 6 GiB heap, 1 GiB of class
	// space, 64 MiB of malloc arena a thread). The JVM's memory kept
	// small, 630 MB in a second; its code cache, which the frames are
	// named from, keeps its default segmented layout.
	cmd := exec.Command(java, "-Xmx64m", "-XX:CompressedClassSpaceSize=16m", "-cp", dir, "Shop", "wait", "20")
	cmd.Env = append(os.Environ(), "MALLOC_ARENA_MAX=1")
	cmd = startShopWait(t, cmd)
	pid := strconv.Itoa(cmd.Process.Pid)
	theirs := jstackFrames(t, jstack, pid)
	prefix := filepath.Join(t.TempDir(), "core")
	if b, err := exec.Command(gcore, "-o", prefix, pid).CombinedOutput(); err != nil {
		t.Fatalf("gcore: %v\n%s", err, b)
	}
	cmd.Process.Kill() // the core alone now
	var stdout, stderr strings.Builder
	if code := run([]string{"snapshot", "--core", prefix + "." + pid}, &stdout, &stderr); code != 0 {
		t.Fatalf("snapshot --core: %s", stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("snapshot --core: %s", stderr.String())
	}
	checkJavaSnapshot(t, stdout.String(), theirs)
}

// startShopWait starts cmd, a JVM running Shop wait N, and returns it
// once its N threads wait in Object.wait; it is killed at the test's end.
func startShopWait(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
	}
	time.Sleep(300 * time.Millisecond) // from printing into Object.wait
	return cmd
}

// jstackFrames returns the Java frames jstack prints for each thread of
// JVM pid, by tid, leaf first, as "Class.method:line" (a native method's
// line 0).
func jstackFrames(t *testing.T, jstack, pid string) map[int][]string {
	js, err := exec.Command(jstack, pid).Output()
	if err != nil {
		t.Fatalf("jstack: %v", err)
	}
	// "\"worker-3\" #17 daemon prio=5 os_prio=0 cpu=0.22ms elapsed=1.04s tid=0x... nid=0x4c0f in Object.wait()  [0x...]"
	// "\tat java.lang.Object.wait(java.base@17.0.15/Native Method)"
	// "\tat Shop.park(Shop.java:39)"
	theirs := map[int][]string{}
	tid := 0
	for _, line := range strings.Split(string(js), "\n") {
		if strings.HasPrefix(line, "\"") {
			tid = 0
			if i := strings.Index(line, " nid=0x"); i >= 0 {
				hex := strings.Fields(line[i+7:])[0]
				n, _ := strconv.ParseInt(hex, 16, 64)
				tid = int(n)
			}
			continue
		}
		at, ok := strings.CutPrefix(strings.TrimSpace(line), "at ")
		if !ok || tid == 0 {
			continue
		}
		name, loc, _ := strings.Cut(at, "(")
		loc = strings.TrimSuffix(loc, ")")
		ln := "0"
		if _, l, ok := strings.Cut(loc, ":"); ok {
			ln = l
		}
		theirs[tid] = append(theirs[tid], name+":"+ln)
	}
	return theirs
}

// checkJavaSnapshot holds a snapshot of Shop wait 20 to jstack's frames
// (jstackFrames): the same top three Java frames on every thread jstack
// shows with some, and the 20 threads in Shop.park among them.
func checkJavaSnapshot(t *testing.T, out string, theirs map[int][]string) {
	t.Helper()
	// "#8  0x00007f1ee8941260 Shop.park (Shop.java:39)"
	ours := map[int][]string{}
	tid := 0
	for _, line := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(line, "TID "); ok {
			tid, _ = strconv.Atoi(strings.TrimSuffix(s, ":"))
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 || !strings.HasPrefix(f[0], "#") {
			continue
		}
		loc := strings.TrimSuffix(strings.TrimPrefix(f[3], "("), ")")
		file, ln, ok := strings.Cut(loc, ":")
		if !ok || !strings.HasSuffix(file, ".java") {
			continue
		}
		ours[tid] = append(ours[tid], f[2]+":"+ln)
	}
	threads := 0
	for tid, want := range theirs {
		want = want[:min(3, len(want))]
		got := ours[tid][:min(3, len(ours[tid]))]
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("thread %d: snapshot's top Java frames %v, jstack's %v", tid, got, want)
			continue
		}
		if strings.HasPrefix(want[len(want)-1], "Shop.park:") {
			threads++
		}
	}
	t.Logf("%d threads with Java frames agree with jstack, %d of them in Shop.park", len(theirs), threads)
	if threads != 20 {
		t.Errorf("%d threads in Shop.park agree with jstack, want 20", threads)
	}
}
