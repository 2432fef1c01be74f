//go:build windows && amd64

package windows

import (
	"fmt"
	"unsafe"

	"github.com/rawstack/rawstack/arch/winunwind"
	"github.com/rawstack/rawstack/internal/win"
)

// windowProcAddr returns the address of the native thread's start routine
// (window_windows_amd64.s).
func windowProcAddr() uintptr

// block is shared with the native thread; its layout is fixed by the
// assembly.
type block struct {
	procs     win.Procs
	reqEvent  uintptr
	doneEvent uintptr
	process   uintptr
	slots     uintptr
	n         uintptr
	quit      uintptr
}

// slot is one thread's entry in a batch; its layout is fixed by the
// assembly.
type slot struct {
	handle uintptr
	buf    uintptr
	bufLen uintptr
	ctx    uintptr
	status uintptr
	got    uintptr
	t0, t1 int64
}

// Slot status values.
const (
	slotOK = iota
	slotSuspendFailed
	slotContextFailed
	slotReadFailed
)

func init() {
	if unsafe.Sizeof(slot{}) != 64 || unsafe.Offsetof(block{}.quit) != 96 {
		panic("platform/windows: block or slot layout does not match the assembly")
	}
}

// window owns the native thread and the memory it works in, all outside
// the Go heap.
type window struct {
	mem       uintptr // one VirtualAlloc region: block, slots, contexts, stacks
	memSize   uintptr
	blk       *block
	slots     []slot
	ctxs      []byte
	stacks    []byte
	cap       int
	stackSize int
	thread    win.Handle
	tid       uint32
	req, done win.Handle
}

// newWindow starts the native thread with room for capacity threads per
// batch and stackSize bytes of stack each, copying from process.
func newWindow(process win.Handle, capacity, stackSize int) (*window, error) {
	procs, err := win.LoadProcs()
	if err != nil {
		return nil, err
	}
	w := &window{cap: capacity, stackSize: stackSize}
	slotsOff := uintptr(128)
	ctxOff := slotsOff + uintptr(capacity)*64
	ctxOff = (ctxOff + 15) &^ 15
	stackOff := ctxOff + uintptr(capacity)*winunwind.ContextSize
	stackOff = (stackOff + 4095) &^ 4095
	w.memSize = stackOff + uintptr(capacity*stackSize)
	if w.mem, err = win.VirtualAlloc(w.memSize); err != nil {
		return nil, fmt.Errorf("allocating the sampler's %d bytes: %w", w.memSize, err)
	}
	w.blk = (*block)(win.Ptr(w.mem))
	w.slots = unsafe.Slice((*slot)(win.Ptr(w.mem+slotsOff)), capacity)
	w.ctxs = unsafe.Slice((*byte)(win.Ptr(w.mem+ctxOff)), capacity*winunwind.ContextSize)
	w.stacks = unsafe.Slice((*byte)(win.Ptr(w.mem+stackOff)), capacity*stackSize)
	if w.req, err = win.NewEvent(); err != nil {
		w.free()
		return nil, err
	}
	if w.done, err = win.NewEvent(); err != nil {
		w.free()
		return nil, err
	}
	w.blk.procs = procs
	w.blk.reqEvent, w.blk.doneEvent = uintptr(w.req), uintptr(w.done)
	w.blk.process = uintptr(process)
	w.blk.slots = w.mem + slotsOff
	for i := range w.slots {
		w.slots[i].buf = uintptr(unsafe.Pointer(&w.stacks[i*stackSize]))
		w.slots[i].bufLen = uintptr(stackSize)
		w.slots[i].ctx = uintptr(unsafe.Pointer(&w.ctxs[i*winunwind.ContextSize]))
	}
	if w.thread, w.tid, err = win.CreateThread(windowProcAddr(), w.mem); err != nil {
		w.free()
		return nil, err
	}
	return w, nil
}

// run samples the threads of handles (at most w.cap) in one batch and
// waits for the native thread to finish it. Slot i's results belong to
// handles[i].
func (w *window) run(handles []win.Handle) {
	for i, h := range handles {
		s := &w.slots[i]
		s.handle = uintptr(h)
		// GetThreadContext fills what ContextFlags asks for.
		*(*uint32)(win.Ptr(s.ctx + 0x30)) = winunwind.ContextControl | winunwind.ContextInteger
	}
	w.blk.n = uintptr(len(handles))
	win.SetEvent(w.req)
	win.Wait(w.done, 0xFFFFFFFF)
}

// context returns slot i's CONTEXT record.
func (w *window) context(i int) []byte {
	return w.ctxs[i*winunwind.ContextSize : (i+1)*winunwind.ContextSize]
}

// stack returns slot i's stack copy.
func (w *window) stack(i int) []byte {
	return w.stacks[i*w.stackSize : i*w.stackSize+int(w.slots[i].got)]
}

// close stops the native thread and frees the memory.
func (w *window) close() {
	if w.thread != 0 {
		w.blk.quit = 1
		win.SetEvent(w.req)
		win.Wait(w.thread, 0xFFFFFFFF)
		win.CloseHandle(w.thread)
		w.thread = 0
	}
	w.free()
}

func (w *window) free() {
	if w.req != 0 {
		win.CloseHandle(w.req)
	}
	if w.done != 0 {
		win.CloseHandle(w.done)
	}
	if w.mem != 0 {
		win.VirtualFree(w.mem)
		w.mem = 0
	}
}
