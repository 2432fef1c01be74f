//go:build linux

package hotspot_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/linux/hotspot"
	"github.com/rawstack/rawstack/platform/snapshot"
)

// startWait runs Shop.java with n threads blocked three calls deep and
// returns its pid once they are.
func startWait(t *testing.T, n int) int {
	java := testbuild.Need(t, "java", "the HotSpot reader reads a live JVM")
	src, _ := filepath.Abs("../../../cmd/rawstack/testdata/jit/Shop.java")
	cmd := exec.Command(java, "-Xshare:auto", src, "wait", itoa(n))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.Contains(sc.Text(), "ready") {
	}
	time.Sleep(300 * time.Millisecond) // into Object.wait
	return cmd.Process.Pid
}

// TestFramesLive reads the Java frames of a JVM's blocked threads while
// they are stopped: each shows Shop.park ← Shop.hold ← Shop.serve with
// their lines, and, once every blob and method is cached, a walk
// allocates nothing (the capture path).
func TestFramesLive(t *testing.T) {
	pid := startWait(t, 4)
	s := hotspot.NewSampling()
	if !s.AttachMaps(uint32(pid)) {
		t.Fatalf("no libjvm found: %v", s.Errors())
	}
	snap, err := snapshot.Process(pid, &snapshot.Options{})
	if err != nil {
		testbuild.Skip(t, "cannot stop the JVM's threads: %v", err)
	}
	names := map[uint64]format.JITFunc{}
	found := 0
	var mainRegs hotspot.Regs
	var mainPCs []uint64
	for _, th := range snap.Threads {
		if th.Err != nil {
			continue
		}
		regs := hotspot.Regs{PC: th.Regs.PC(), SP: th.Regs.SP(), FP: th.Regs.FP()}
		frames, fresh, _ := s.Frames(uint32(pid), regs, hotspot.Stack{Live: true}, th.PCs)
		for _, f := range fresh {
			names[f.ID] = f
		}
		var got []string
		for _, f := range frames {
			fn := names[f.Func]
			got = append(got, fn.Name+":"+itoa(int(f.Line)))
		}
		t.Logf("%d %s: %v", th.Tid, th.Name, got)
		if strings.Contains(strings.Join(got, " "), "Shop.park:39 Shop.hold:42 Shop.serve:44") {
			found++
			mainRegs, mainPCs = regs, th.PCs
		}
	}
	if found > 0 {
		allocs := testing.AllocsPerRun(50, func() { s.Frames(uint32(pid), mainRegs, hotspot.Stack{Live: true}, mainPCs) })
		if allocs != 0 {
			t.Errorf("a walk over cached methods allocates %.1f times, want 0", allocs)
		}
	}
	if errs := s.Errors(); len(errs) > 0 {
		t.Fatal(errs)
	}
	if found != 4 {
		t.Errorf("%d threads show Shop.park:39 Shop.hold:42 Shop.serve:44, want 4 (stats %+v)", found, s.Stats())
	}
}

// TestCaptureSeeds writes FuzzFrames's seeds (testdata/fuzz/FuzzFrames)
// from a JVM running Shop.java: one of a blocked thread (interpreted
// frames), and, with $RAWSTACK_CAPTURE_PID, of that JVM's threads (a busy
// Shop.java: compiled and inlined frames).
func TestCaptureSeeds(t *testing.T) {
	if os.Getenv("RAWSTACK_CAPTURE") == "" {
		t.Skip("RAWSTACK_CAPTURE not set: the seeds are in testdata")
	}
	pid, _ := strconv.Atoi(os.Getenv("RAWSTACK_CAPTURE_PID"))
	if pid == 0 {
		pid = startWait(t, 2)
	}
	s := hotspot.NewSampling()
	if !s.AttachMaps(uint32(pid)) {
		t.Fatalf("no libjvm: %v", s.Errors())
	}
	snap, err := snapshot.Process(pid, &snapshot.Options{NoThreadNames: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, th := range snap.Threads {
		if th.Err != nil || n == 2 {
			continue
		}
		img, frames := s.CaptureSeed(uint32(pid), hotspot.Regs{PC: th.Regs.PC(), SP: th.Regs.SP(), FP: th.Regs.FP()}, th.PCs)
		if frames < 3 {
			continue
		}
		name := os.Getenv("RAWSTACK_CAPTURE") + "-" + itoa(n)
		t.Logf("thread %d: %d frames, seed %s of %d bytes", th.Tid, frames, name, len(img))
		hotspot.WriteSeed(t, name, img)
		n++
	}
	if n == 0 {
		t.Fatal("no thread had Java frames")
	}
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
