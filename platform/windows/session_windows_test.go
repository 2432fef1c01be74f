//go:build windows && amd64

package windows

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/internal/win"
	"github.com/rawstack/rawstack/platform"
)

// collector is a platform.Handler that keeps what it is given.
type collector struct {
	mu       sync.Mutex
	procs    []format.Process
	ends     []format.ProcessEnd
	threads  map[uint32]bool
	modules  []format.ModuleLoad
	unloads  []format.ModuleUnload
	samples  []platform.Sample
	names    map[uint32]string
	lastTime int64
}

func newCollector() *collector { return &collector{threads: map[uint32]bool{}} }

func (c *collector) Process(e *format.Process) {
	c.mu.Lock()
	c.procs = append(c.procs, *e)
	c.mu.Unlock()
}
func (c *collector) ProcessEnd(e *format.ProcessEnd) {
	c.mu.Lock()
	c.ends = append(c.ends, *e)
	c.mu.Unlock()
}
func (c *collector) ThreadStart(e *format.ThreadStart) {
	c.mu.Lock()
	c.threads[e.Tid] = true
	c.mu.Unlock()
}
func (c *collector) ThreadName(e *format.ThreadName) {
	c.mu.Lock()
	if c.names == nil {
		c.names = map[uint32]string{}
	}
	c.names[e.Tid] = e.Name
	c.mu.Unlock()
}
func (c *collector) ThreadEnd(e *format.ThreadEnd) {}
func (c *collector) ModuleLoad(e *format.ModuleLoad) {
	c.mu.Lock()
	c.modules = append(c.modules, *e)
	c.mu.Unlock()
}
func (c *collector) ModuleUnload(e *format.ModuleUnload) {
	c.mu.Lock()
	c.unloads = append(c.unloads, *e)
	c.mu.Unlock()
}
func (c *collector) Sample(s *platform.Sample) {
	c.mu.Lock()
	x := *s
	x.PCs = append([]uint64(nil), s.PCs...)
	c.samples = append(c.samples, x)
	c.mu.Unlock()
}
func (c *collector) Lost(e *format.Lost) {}

func (c *collector) module(pc uint64) *format.ModuleLoad {
	for i := range c.modules {
		m := &c.modules[i]
		if pc >= m.Base && pc-m.Base < m.Size {
			return m
		}
	}
	return nil
}

//go:noinline
func spinA(stop *bool) int {
	n := 0
	for !*stop {
		n += spinB(n)
	}
	return n
}

//go:noinline
func spinB(n int) int {
	for i := 0; i < 1000; i++ {
		n = n*31 + i
	}
	return n & 1
}

// TestSelfSampling samples the test process itself while a goroutine
// spins in spinA → spinB, and checks that the unwound stacks of its thread
// name both, in order, through runtime.FuncForPC.
func TestSelfSampling(t *testing.T) {
	c := newCollector()
	s, err := Open(platform.Config{Frequency: 500}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stop := false
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		done <- spinA(&stop)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	stop = true
	<-done
	st := s.Stats()
	t.Logf("%d samples, %d threads, %d modules; suspended p50 %v p99 %v max %v over %d suspensions",
		st.Samples, len(c.threads), len(c.modules), time.Duration(st.SuspendP50), time.Duration(st.SuspendP99), time.Duration(st.SuspendMax), st.Suspensions)
	if len(c.modules) == 0 || !strings.HasSuffix(strings.ToLower(c.modules[0].Path), ".exe") {
		t.Errorf("modules: %+v", c.modules)
	}
	found := 0
	for _, smp := range c.samples {
		var names []string
		for _, pc := range smp.PCs {
			if f := runtime.FuncForPC(uintptr(pc)); f != nil {
				names = append(names, f.Name())
			}
		}
		j := strings.Join(names, " ")
		if strings.Contains(j, "windows.spinB platform/windows.spinA") || strings.Contains(j, "windows.spinB github.com/rawstack/rawstack/platform/windows.spinA") {
			found++
			if found == 1 {
				t.Logf("stack: %s", j)
			}
		}
	}
	if found < 10 {
		for _, smp := range c.samples[:min(5, len(c.samples))] {
			t.Logf("sample tid %d: %x", smp.Tid, smp.PCs)
		}
		t.Errorf("%d of %d samples show spinB called by spinA", found, len(c.samples))
	}
	if st.Suspensions == 0 || st.SuspendP50 <= 0 {
		t.Errorf("no suspended windows measured: %+v", st)
	}
	// A sample weighs the nanoseconds of CPU it stands for (format/SPEC.md
	// §6.10): what its thread used since its previous sample, more than
	// nothing and at most the test's run.
	for _, smp := range c.samples {
		if smp.Weight == 0 || smp.Weight > uint64(10*time.Second) {
			t.Errorf("sample of thread %d weighs %d ns: not a thread's CPU time since its previous sample", smp.Tid, smp.Weight)
			break
		}
	}
}

// TestLaunchExits launches a command, samples it and sees it exit.
func TestLaunchExits(t *testing.T) {
	exe := os.Getenv("RAWSTACK_WINE_CHAIN")
	if exe == "" {
		testbuild.Skip(t, "RAWSTACK_WINE_CHAIN not set: the C fixture is built by the Linux side (wine_linux_test.go)")
	}
	c := newCollector()
	s, err := Launch(exec.Command(exe, "1"), platform.Config{Frequency: 200}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(c.ends) != 1 {
		t.Errorf("process ends: %+v", c.ends)
	}
	t.Logf("%d samples, %d modules", len(c.samples), len(c.modules))
}

type nopHandler struct{ samples int }

func (*nopHandler) Process(*format.Process)           {}
func (*nopHandler) ProcessEnd(*format.ProcessEnd)     {}
func (*nopHandler) ThreadStart(*format.ThreadStart)   {}
func (*nopHandler) ThreadName(*format.ThreadName)     {}
func (*nopHandler) ThreadEnd(*format.ThreadEnd)       {}
func (*nopHandler) ModuleLoad(*format.ModuleLoad)     {}
func (*nopHandler) ModuleUnload(*format.ModuleUnload) {}
func (h *nopHandler) Sample(*platform.Sample)         { h.samples++ }
func (*nopHandler) Lost(*format.Lost)                 {}

// TestSampleAllocs pins that a round of samples — the native window, then
// decoding each context and unwinding each copy — allocates nothing once
// the images' unwind pages are cached.
func TestSampleAllocs(t *testing.T) {
	h := &nopHandler{}
	s, err := Open(platform.Config{Frequency: 100}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A thread that runs, so that rounds sample it (idle threads are
	// skipped).
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				spinB(1)
			}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	time.Sleep(50 * time.Millisecond) // the spinner's thread starts and is listed
	ts, err := win.Threads(s.pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.samplerID = win.CurrentThreadID()
	if th := s.byTid[s.samplerID]; th != nil {
		s.dropThread(th, s.now())
	}
	s.applyThreads(ts, s.now())
	for i := 0; i < 5; i++ {
		time.Sleep(25 * time.Millisecond) // more than a CPU accounting quantum
		s.sampleAll()
	}
	n := testing.AllocsPerRun(20, s.sampleAll)
	t.Logf("%d threads, %d samples; %.1f allocations per round", len(s.threads), h.samples, n)
	if n != 0 || h.samples == 0 {
		t.Errorf("%.1f allocations per round of %d threads, want 0", n, len(s.threads))
	}
}
