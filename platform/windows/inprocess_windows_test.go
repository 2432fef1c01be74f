//go:build windows && amd64

package windows

import (
	"context"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform"
)

// TestDLLLoadedAfterStart loads a DLL while the process samples itself:
// LdrRegisterDllNotification must report it (with its PDB identity) before
// samples land in it, the samples must unwind through it, and unloading it
// must report ModuleUnload.
func TestDLLLoadedAfterStart(t *testing.T) {
	dllPath := os.Getenv("RAWSTACK_WINE_DLL")
	if dllPath == "" {
		testbuild.Skip(t, "RAWSTACK_WINE_DLL not set: the DLL fixture is built by the Linux side (wine_test.go)")
	}
	c := newCollector()
	s, err := Open(platform.Config{Frequency: 500}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- s.Run(ctx) }()
	time.Sleep(200 * time.Millisecond)

	var spin uintptr
	done := make(chan struct{})
	var dll syscall.Handle
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		h, err := syscall.LoadLibrary(dllPath)
		if err != nil {
			t.Errorf("LoadLibrary %s: %v", dllPath, err)
			return
		}
		dll = h
		p, err := syscall.GetProcAddress(h, "dll_spin")
		if err != nil {
			t.Errorf("GetProcAddress: %v", err)
			return
		}
		spin = p
		for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); {
			syscall.SyscallN(p, 200000)
		}
	}()
	<-done
	if dll != 0 {
		syscall.FreeLibrary(dll)
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if spin == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.module(uint64(spin))
	if m == nil || !strings.HasSuffix(strings.ToLower(m.Path), "spin.dll") {
		t.Fatalf("no module for dll_spin at %#x: %+v", spin, c.modules)
	}
	if !m.HasPDB() || m.TimeDateStamp == 0 || m.SizeOfImage == 0 {
		t.Errorf("spin.dll without its identity: %+v", m)
	}
	unloaded := false
	for _, u := range c.unloads {
		unloaded = unloaded || u.ID == m.ID
	}
	if !unloaded {
		t.Errorf("FreeLibrary reported no ModuleUnload of %s", m.Path)
	}
	// dll_spin calls dll_inner at its start: a sample in dll_inner must
	// unwind to a return address a few bytes into dll_spin.
	through := 0
	for _, smp := range c.samples {
		if len(smp.PCs) >= 2 && smp.PCs[0]-m.Base < m.Size && smp.PCs[1] > uint64(spin) && smp.PCs[1]-uint64(spin) < 64 {
			through++
		}
	}
	t.Logf("%d samples, %d through dll_inner <- dll_spin", len(c.samples), through)
	// Under Wine on a loaded machine a thread-sample takes milliseconds
	// and a new thread is found 0.1-0.5 s after it starts.
	if through < 3 {
		t.Errorf("only %d samples unwound from dll_inner to dll_spin", through)
	}
}

var (
	kernel32      = syscall.NewLazyDLL("kernel32.dll")
	procHeapAlloc = kernel32.NewProc("HeapAlloc")
	procHeapFree  = kernel32.NewProc("HeapFree")
	procGetHeap   = kernel32.NewProc("GetProcessHeap")
)

// TestHeapHammerNoDeadlock samples the process at 1 kHz for 10 s while one
// thread hammers the Windows process heap (HeapAlloc/HeapFree) and
// goroutines hammer the Go heap: a thread suspended inside either holds
// its lock, and the sampler must neither wait for it nor take it. The
// handler allocates, as the tracer's does, after the threads are resumed.
func TestHeapHammerNoDeadlock(t *testing.T) {
	dur := 10 * time.Second
	if testing.Short() {
		dur = 2 * time.Second
	}
	c := newCollector()
	s, err := Open(platform.Config{Frequency: 1000}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stop atomic.Bool
	var heapOps, goOps atomic.Uint64
	heap, _, _ := procGetHeap.Call()
	go func() {
		runtime.LockOSThread()
		for !stop.Load() {
			p, _, _ := procHeapAlloc.Call(heap, 0, 24+uintptr(heapOps.Load()%4000))
			if p != 0 {
				procHeapFree.Call(heap, 0, p)
			}
			heapOps.Add(1)
		}
	}()
	var sink atomic.Pointer[[]byte]
	for i := 0; i < 2; i++ {
		go func() {
			for !stop.Load() {
				b := make([]byte, 16+goOps.Load()%30000)
				sink.Store(&b)
				goOps.Add(1)
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(dur + 30*time.Second):
		stop.Store(true)
		buf := make([]byte, 1<<20)
		t.Fatalf("sampler did not return 30 s after its deadline: deadlock?\n%s", buf[:runtime.Stack(buf, true)])
	}
	stop.Store(true)
	st := s.Stats()
	t.Logf("%v at 1 kHz: %d samples of %d threads, %d HeapAlloc/Free pairs, %d Go allocations; suspended p50 %v p99 %v max %v",
		dur, st.Samples, len(c.threads), heapOps.Load(), goOps.Load(), time.Duration(st.SuspendP50), time.Duration(st.SuspendP99), time.Duration(st.SuspendMax))
	// Every sample is of a thread that ran since its previous one (idle
	// threads are not suspended): nearly all suspended the hammering
	// threads, where the heap locks are held. (Sampling every thread, 100
	// samples of 10 threads held about 30 of theirs.)
	if st.Samples < 50 || heapOps.Load() == 0 || goOps.Load() == 0 {
		t.Errorf("too little happened: %+v", st)
	}
}
