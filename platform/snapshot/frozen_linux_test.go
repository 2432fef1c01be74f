package snapshot

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/platform"
)

// TestFrozen reads a stopped process through Frozen: its threads are in
// tracing stop while the reader runs, a batch with an unreadable piece in
// the middle reads the others, and the threads run again afterwards.
func TestFrozen(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	pid := cmd.Process.Pid
	var base uint64
	for deadline := time.Now().Add(10 * time.Second); base == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		maps, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
		for _, line := range strings.Split(string(maps), "\n") {
			f := strings.Fields(line)
			if len(f) >= 6 && f[5] == exe && strings.Trim(f[2], "0") == "" {
				lo, _, _ := strings.Cut(f[0], "-")
				base, _ = strconv.ParseUint(lo, 16, 64)
				break
			}
		}
	}
	if base == 0 {
		t.Fatal("sleep's executable is not mapped")
	}
	var reads []MemRead
	var threads int
	var states map[int]string
	_, stopped, err := Frozen(pid, func(ts []ImageThread, read func([]MemRead)) error {
		threads = len(ts)
		states = threadStates(t, pid)
		reads = []MemRead{{Addr: base, Buf: make([]byte, 4)}, {Addr: 8, Buf: make([]byte, 8)}, {Addr: base + 1, Buf: make([]byte, 3)}}
		read(reads)
		return nil
	})
	var pe *platform.PermissionError
	if errors.As(err, &pe) {
		t.Skipf("ptrace not permitted: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if threads == 0 || stopped <= 0 {
		t.Errorf("%d threads, stopped %v", threads, stopped)
	}
	for tid, st := range states {
		if st[0] != 't' {
			t.Errorf("tid %d was %q while the reader ran, want in tracing stop", tid, st)
		}
	}
	if !reads[0].OK || string(reads[0].Buf) != "\x7fELF" || reads[1].OK || !reads[2].OK || string(reads[2].Buf) != "ELF" {
		t.Errorf("reads: %+v, want the ELF header read around an unreadable address", reads)
	}
	checkReleased(t, pid)
}
