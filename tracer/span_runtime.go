package tracer

import (
	"runtime"
	"sync"
	_ "unsafe" // go:linkname
)

// The runtime's own pinning, which sync.Pool uses: while pinned, the
// goroutine cannot be preempted or moved to another P.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// mOK says getm reads the running goroutine's M; see checkGetM.
var mOK bool

// curM returns an address identifying the OS thread (the runtime's M) the
// caller runs on, or 0 when that cannot be read cheaply here.
func curM() uintptr {
	if !mOK {
		return 0
	}
	return getm()
}

// checkGetM verifies, once, that getm tells OS threads apart and is stable
// on one thread: g.m's offset is fixed by the toolchain's linker ("offset
// known to liblink"), but a check costs little and a wrong reading would
// only cost the thread id cache, never correctness (curM then returns 0 and
// every record asks the kernel).
func checkGetM() {
	if !haveGetM {
		return
	}
	// Two goroutines locked to two threads at the same time.
	ms := make(chan [2]uintptr, 2)
	var locked, read sync.WaitGroup
	locked.Add(2)
	read.Add(1)
	for i := 0; i < 2; i++ {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			locked.Done()
			read.Wait()
			a := getm()
			runtime.Gosched()
			ms <- [2]uintptr{a, getm()}
		}()
	}
	locked.Wait()
	read.Done()
	a, b := <-ms, <-ms
	mOK = a[0] != 0 && a[0] == a[1] && b[0] == b[1] && a[0] != b[0] && a[0]%8 == 0 && b[0]%8 == 0
}
