package procinfo

import (
	"os"
	"runtime"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

func TestProcinfo(t *testing.T) {
	if runtime.GOOS != "linux" {
		testbuild.Impossible(t, "not-linux") // reads /proc
	}
	if KernelThread(os.Getpid()) {
		t.Error("this test process reads as a kernel thread")
	}
	if !KernelThread(2) {
		t.Log("pid 2 is not a kernel thread here (a PID namespace?)")
	} else if c := Comm(2); c != "kthreadd" {
		t.Errorf("pid 2 named %q, want kthreadd", c)
	}
	if KernelThread(-1) || KernelThread(1<<30) {
		t.Error("a missing pid reads as a kernel thread")
	}
	if tp, _ := Tracer(os.Getpid()); tp != 0 {
		t.Logf("this test runs under tracer %d", tp)
	}
}
