package goroutines

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/platform/snapshot"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
)

const workers = 50

// chain is the stack every worker of the fixture is parked in, innermost
// first, below the runtime's frames; stage2 and worker are inlined.
var chain = []struct {
	fn      string
	inlined bool
}{
	{"main.stage3", false},
	{"main.stage2", true},
	{"main.stage1", false},
	{"main.worker", true},
}

// oracleWorkers returns the ids of the goroutines parked in main.stage3
// and the state of each as the fixture's own runtime prints them
// (/debug/pprof/goroutine?debug=2, the runtime's traceback format).
func oracleWorkers(t *testing.T, addr string) map[int64]string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=2")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	head := regexp.MustCompile(`^goroutine (\d+) \[([^\],]+)`)
	out := map[int64]string{}
	for _, block := range strings.Split(string(b), "\n\n") {
		m := head.FindStringSubmatch(block)
		if m == nil || !strings.Contains(block, "main.stage3(") {
			continue
		}
		id, _ := strconv.ParseInt(m[1], 10, 64)
		out[id] = m[2]
	}
	return out
}

// checkDump checks d against the fixture: the workers the oracle lists,
// each parked in the chain, created by main.main, and the spinner.
func checkDump(t *testing.T, d *Dump, oracle map[int64]string, live bool) {
	t.Helper()
	got := map[int64]string{}
	spinners := 0
	for i := range d.Goroutines {
		g := &d.Goroutines[i]
		if g.Err != nil {
			t.Errorf("goroutine %d: %v", g.ID, g.Err)
		}
		k := slices.IndexFunc(g.Frames, func(f Frame) bool { return f.Func == "main.stage3" })
		if k >= 0 {
			got[g.ID] = g.State()
			if len(g.Frames) < k+len(chain) {
				t.Errorf("goroutine %d: %d frames, want the chain below frame %d", g.ID, len(g.Frames), k)
				continue
			}
			for j, c := range chain {
				f := g.Frames[k+j]
				if f.Func != c.fn || f.Inlined != c.inlined || f.Line == 0 || filepath.Base(f.File) != "main.go" {
					t.Errorf("goroutine %d frame %d: %s %s:%d inlined=%v, want %s inlined=%v", g.ID, k+j, f.Func, f.File, f.Line, f.Inlined, c.fn, c.inlined)
				}
			}
			if g.CreatedBy.Func != "main.main" {
				t.Errorf("goroutine %d: created by %q, want main.main", g.ID, g.CreatedBy.Func)
			}
		}
		if len(g.Frames) > 0 && g.Frames[0].Func == "main.spin" {
			spinners++
			if live && (g.Status != "running" || g.Thread == 0) {
				t.Errorf("spinning goroutine %d: status %q on thread %d, want running on a thread", g.ID, g.Status, g.Thread)
			}
			if live && !threadExists(d.Pid, g.Thread) {
				t.Errorf("spinning goroutine %d: thread %d is not a thread of pid %d", g.ID, g.Thread, d.Pid)
			}
		}
	}
	if spinners != 1 {
		t.Errorf("%d goroutines in main.spin, want 1", spinners)
	}
	if len(got) != workers {
		t.Errorf("%d goroutines in the chain, want %d", len(got), workers)
	}
	for id, st := range oracle {
		if got[id] != st {
			t.Errorf("goroutine %d: state %q, the runtime's own traceback says %q", id, got[id], st)
		}
	}
	for id := range got {
		if _, ok := oracle[id]; !ok {
			t.Errorf("goroutine %d is in the chain here but not in the runtime's own traceback", id)
		}
	}
	groups := GroupAll(d.Goroutines)
	if len(groups) == 0 || len(groups[0].IDs) != workers || groups[0].State != "chan receive" {
		t.Errorf("largest group: %+v, want the %d workers in chan receive", groups[0], workers)
	}
}

func threadExists(pid, tid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, tid))
	return tid != 0 && err == nil
}

// processOrSkip lists pid's goroutines, skipping where ptrace is refused.
func processOrSkip(t *testing.T, pid int) *Dump {
	t.Helper()
	d, err := Process(pid, nil)
	var pe *platform.PermissionError
	if errors.As(err, &pe) {
		testbuild.Skip(t, "ptrace not permitted: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkReleased fails unless every thread of pid runs again, untraced.
func checkReleased(t *testing.T, pid int) {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, e.Name()))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "State:"); ok && strings.Contains(v, "t (tracing stop)") {
				t.Errorf("tid %s left in %s", e.Name(), strings.TrimSpace(v))
			}
			if v, ok := strings.CutPrefix(l, "TracerPid:"); ok && strings.TrimSpace(v) != "0" {
				t.Errorf("tid %s still traced by %s", e.Name(), strings.TrimSpace(v))
			}
		}
	}
}

// TestProcess lists the goroutines of the live fixture and checks them
// against the fixture's own /debug/pprof traceback.
func TestProcess(t *testing.T) {
	bin := buildParked(t)
	launched := time.Now()
	cmd, addr := startParked(t, bin, "-n", strconv.Itoa(workers), "-http", "127.0.0.1:0")
	pid := cmd.Process.Pid
	oracle := oracleWorkers(t, addr)
	if len(oracle) != workers {
		t.Fatalf("the fixture's traceback shows %d workers, want %d", len(oracle), workers)
	}
	d := processOrSkip(t, pid)
	checkReleased(t, pid)
	checkDump(t, d, oracle, true)
	// The fixture collected once after its workers parked, so the
	// runtime recorded their wait (for those parked by then: most); it
	// began after the fixture started.
	recorded := 0
	for i := range d.Goroutines {
		g := &d.Goroutines[i]
		if len(g.Frames) < 4 || g.Frames[3].Func != "main.stage3" || g.WaitSince == 0 {
			continue
		}
		recorded++
		if w := d.Waited(g); w <= 0 || w > time.Since(launched) {
			t.Errorf("goroutine %d: waited %v (waitsince %d, snapshot at %d), want more than 0 and less than the fixture has lived (%v)", g.ID, w, g.WaitSince, d.Time, time.Since(launched))
		}
	}
	if recorded < workers/2 {
		t.Errorf("%d of %d workers have a recorded wait, want most", recorded, workers)
	}
	if d.Stopped <= 0 || d.Copied <= 0 || d.Time == 0 {
		t.Errorf("stopped %v, copied %d, time %d: want all set", d.Stopped, d.Copied, d.Time)
	}
	if d.GoVersion == "" || d.Pid != pid {
		t.Errorf("go version %q, pid %d", d.GoVersion, d.Pid)
	}
	t.Logf("%d goroutines, threads stopped %v, %d bytes copied", len(d.Goroutines), d.Stopped, d.Copied)
}

// TestCore lists the goroutines of a gcore dump of the fixture.
func TestCore(t *testing.T) {
	testbuild.Need(t, "gcore", "dumps the fixture's core")
	bin := buildParked(t)
	cmd, addr := startParked(t, bin, "-n", strconv.Itoa(workers), "-http", "127.0.0.1:0")
	pid := cmd.Process.Pid
	oracle := oracleWorkers(t, addr)
	prefix := filepath.Join(t.TempDir(), "core")
	out, err := exec.Command("gcore", "-o", prefix, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "ptrace") {
			testbuild.Skip(t, "gcore cannot attach here: %s", out)
		}
		t.Fatalf("gcore: %v\n%s", err, out)
	}
	checkReleased(t, pid)
	d, err := Core(prefix+"."+strconv.Itoa(pid), bin, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkDump(t, d, oracle, false)
}

// TestNoDWARF checks the errors for a Go binary without DWARF, live and
// from its file, and for a binary that is not Go.
func TestNoDWARF(t *testing.T) {
	for _, flags := range [][]string{{"-ldflags=-w"}, {"-ldflags=-s -w"}} {
		bin := buildParked(t, flags...)
		err := CheckBinary(bin)
		if !errors.Is(err, ErrNoDWARF) || !strings.Contains(err.Error(), bin) || !strings.Contains(err.Error(), "go1.") {
			t.Errorf("%v: CheckBinary: %v, want ErrNoDWARF naming the file and Go version", flags, err)
		}
		if _, err := Core("/nonexistent-core", bin, nil); !errors.Is(err, ErrNoDWARF) {
			t.Errorf("%v: Core: %v, want ErrNoDWARF", flags, err)
		}
		cmd, _ := startParked(t, bin, "-n", "3")
		_, err = Process(cmd.Process.Pid, nil)
		if !errors.Is(err, ErrNoDWARF) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(cmd.Process.Pid)) {
			t.Errorf("%v: Process: %v, want ErrNoDWARF naming the pid", flags, err)
		}
		checkReleased(t, cmd.Process.Pid)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		testbuild.Skip(t, "no sh")
	}
	if err := CheckBinary(sh); !errors.Is(err, ErrNotGo) {
		t.Errorf("CheckBinary(%s): %v, want ErrNotGo", sh, err)
	}
}

// TestDirectMatchesDelve reads one copy of the live fixture both ways:
// directly (what Process does) and with delve's core reader, the oracle.
// Every goroutine must come out the same: status, wait, thread, labels,
// creator and every frame of its stack.
func TestDirectMatchesDelve(t *testing.T) {
	bin := buildParked(t)
	cmd, _ := startParked(t, bin, "-n", strconv.Itoa(workers), "-labels")
	pid := cmd.Process.Pid
	exe, _, x, err := processExe(pid)
	if err != nil {
		t.Fatal(err)
	}
	want, im, err := processDelve(pid, nil)
	var pe *platform.PermissionError
	if errors.As(err, &pe) {
		t.Skipf("ptrace not permitted: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	checkReleased(t, pid)
	for _, planned := range []bool{false, true} {
		t.Run(map[bool]string{false: "unplanned", true: "planned"}[planned], func(t *testing.T) {
			got, err := x.readDirect(imageMemory(im), imageBias(im, exe, x), regsOf(im.Arch, im.Threads), nil, planned)
			if err != nil {
				t.Fatal(err)
			}
			compareDelve(t, got, want)
		})
	}
	// A plan made before a goroutine was created (allgs one shorter then)
	// and memory that runs out: the stopped pass reads afresh what the
	// plan no longer describes, and copies into the heap past the arenas.
	t.Run("stale plan", func(t *testing.T) {
		mem, bias, le := imageMemory(im), imageBias(im, exe, x), binary.LittleEndian
		rd := func(rs []snapshot.MemRead) {
			for i := range rs {
				rs[i].OK = mem(rs[i].Addr, rs[i].Buf) || (rs[i].Addr >= bias && x.readFile(rs[i].Addr-bias, rs[i].Buf))
			}
		}
		stale := func(rs []snapshot.MemRead) {
			rd(rs)
			for i := range rs {
				if rs[i].Addr == x.allgs+bias && len(rs[i].Buf) >= 16 {
					le.PutUint64(rs[i].Buf[8:], le.Uint64(rs[i].Buf[8:])-1)
				}
			}
		}
		plan := x.plan(stale, bias)
		if plan == nil || len(plan.arenas) != 2 {
			t.Fatalf("no plan: %+v", plan)
		}
		plan.arenas[1] = plan.arenas[1][:pageSize]
		gs, err := x.collect(rd, bias, regsOf(im.Arch, im.Threads), plan)
		if err != nil {
			t.Fatal(err)
		}
		compareDelve(t, x.interpret(gs, nil), want)
	})
}

// compareDelve fails t where a goroutine of got differs from delve's
// (want).
func compareDelve(t *testing.T, got, want *Dump) {
	if len(got.Goroutines) != len(want.Goroutines) {
		t.Errorf("%d goroutines read directly, delve reads %d", len(got.Goroutines), len(want.Goroutines))
	}
	byID := map[int64]*Goroutine{}
	for i := range got.Goroutines {
		byID[got.Goroutines[i].ID] = &got.Goroutines[i]
	}
	bad := 0
	for i := range want.Goroutines {
		w := &want.Goroutines[i]
		g := byID[w.ID]
		if g == nil {
			t.Errorf("goroutine %d: delve lists it, the direct reader does not", w.ID)
			continue
		}
		diff := func(what string, a, b any) {
			if bad < 40 {
				t.Errorf("goroutine %d %s: direct %v, delve %v", w.ID, what, a, b)
			}
			bad++
		}
		if g.Status != w.Status || g.WaitReason != w.WaitReason || g.WaitSince != w.WaitSince {
			diff("state", []any{g.Status, g.WaitReason, g.WaitSince}, []any{w.Status, w.WaitReason, w.WaitSince})
		}
		if g.Thread != w.Thread {
			diff("thread", g.Thread, w.Thread)
		}
		if !sameLabels(g.Labels, w.Labels) {
			diff("labels", g.Labels, w.Labels)
		}
		if g.CreatedBy != w.CreatedBy {
			diff("created by", g.CreatedBy, w.CreatedBy)
		}
		if g.StartFunc != w.StartFunc {
			diff("start function", g.StartFunc, w.StartFunc)
		}
		if g.System != w.System {
			diff("system", g.System, w.System)
		}
		if !slices.Equal(g.Frames, w.Frames) {
			diff("frames", g.Frames, w.Frames)
		}
		if (g.Err == nil) != (w.Err == nil) {
			diff("error", g.Err, w.Err)
		}
	}
	labelled := 0
	for _, g := range want.Goroutines {
		if g.Labels["kind"] == "worker" {
			labelled++
		}
	}
	if labelled != workers-(workers+2)/3 {
		t.Errorf("delve sees %d labelled workers, want %d", labelled, workers-(workers+2)/3)
	}
	t.Logf("%d goroutines compared, %d differences", len(want.Goroutines), bad)
}
