//go:build linux

package v8_test

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform/linux/v8"
	"github.com/rawstack/rawstack/platform/snapshot"
)

// TestFramesLive reads the frames of node blocked in wait.js (its stack
// stays put) from a copy of its stack, as a recording does: the script's
// functions by name and line, and, once every object is cached, with no
// allocation (the capture path).
func TestFramesLive(t *testing.T) {
	node := testbuild.Need(t, "node", "the V8 reader reads a live node")
	wait, _ := filepath.Abs("../../../cmd/rawstack/testdata/jit/wait.js")
	cmd := exec.Command(node, wait)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.Contains(sc.Text(), "run_main_module") {
	}
	time.Sleep(100 * time.Millisecond) // into Atomics.wait
	pid := cmd.Process.Pid
	snap, err := snapshot.Process(pid, &snapshot.Options{NoThreadNames: true})
	if err != nil {
		testbuild.Skip(t, "cannot stop node's threads: %v", err)
	}
	var th *snapshot.Thread
	for i := range snap.Threads {
		if snap.Threads[i].Tid == pid {
			th = &snap.Threads[i]
		}
	}
	if th == nil || th.Err != nil {
		t.Fatalf("no main thread in the snapshot: %+v", th)
	}
	sp := th.Regs.SP()
	stack := make([]byte, 16<<10)
	n, err := sys.ProcessVMRead(pid, stack, []sys.RemoteIovec{{Base: uintptr(sp), Len: len(stack)}})
	if err != nil || n == 0 {
		t.Fatalf("reading the stack: %d bytes, %v", n, err)
	}
	stack = stack[:n] // up to the stack's top
	s := v8.NewSampling()
	if !s.AttachMaps(uint32(pid)) {
		t.Fatalf("no V8 found in node: %v", s.Errors())
	}
	regs := v8.Regs{PC: th.Regs.PC(), SP: sp, FP: th.Regs.FP()}
	st := v8.Stack{Addr: sp, Data: stack}
	frames, fresh := s.Frames(uint32(pid), regs, st, th.PCs)
	names := map[uint64]format.JITFunc{}
	for _, f := range fresh {
		names[f.ID] = f
	}
	var got []string
	for _, f := range frames {
		fn := names[f.Func]
		if fn.File == wait {
			got = append(got, fn.Name+":"+itoa(f.Line))
		}
	}
	if strings.Join(got, " ") != "c:5 b:6 a:7 (anonymous):8" {
		t.Errorf("wait.js frames %v, want c:5 b:6 a:7 (anonymous):8", got)
	}
	for _, f := range frames {
		if f.Tier != format.JITTierInterpreted {
			t.Errorf("frame %+v: tier %v, want interpreted (cold code)", f, f.Tier)
		}
	}
	// The frame-pointer walk from the registers alone stops in libc's
	// futex wait, which keeps no frame pointer: the native stack is what
	// gets past it.
	if allocs := testing.AllocsPerRun(100, func() { s.Frames(uint32(pid), regs, st, th.PCs) }); allocs != 0 {
		t.Errorf("Frames allocated %.1f times per call with everything cached", allocs)
	}
	t.Logf("%d frames, %v", len(frames), s.Stats())
}

func itoa(n uint32) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
