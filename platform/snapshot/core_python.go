package snapshot

import (
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform/linux/cpython"
)

// readPython gives the threads of a core of a CPython process their
// Python frames and GIL marks, read (as from a live process, by
// platform/linux/cpython's Reader) from the memory the core holds: the
// interpreter's runtime state, thread states, frames and code objects
// are in its data, heap and stacks, which a core keeps (the kernel's
// default coredump_filter and gcore do). The interpreter is found in the
// python executable or libpython the core maps, through resolve. A core
// that lacks a page a chain needs gives that chain up to the frame
// before it, as a read that fails in a live process does.
func (c *CoreFile) readPython(snap *Snapshot, maps []mapping, resolve func(string) string) {
	read := func(_ uint32, addr uint64, b []byte) bool { return c.ReadMemory(addr, b) == nil }
	read2 := func(_ uint32, a1 uint64, n1 int, a2 uint64, n2 int, b []byte) int {
		if c.ReadMemory(a1, b[:n1]) != nil {
			return 0
		}
		if n2 == 0 || c.ReadMemory(a2, b[n1:n1+n2]) != nil {
			return n1
		}
		return n1 + n2
	}
	r := cpython.NewReader(read, read2)
	pid := uint32(snap.Pid)
	for _, m := range maps {
		if !m.Exec() || !cpython.MaybePython(m.Path) {
			continue
		}
		file := resolve(m.Path)
		if file == "" {
			continue
		}
		in, err := cpython.Load(file, m.Path)
		if err != nil {
			continue
		}
		if bias, ok := in.Bias(m.Start, m.Offset); ok {
			r.Attach(pid, in, bias)
			break
		}
	}
	if !r.Attached(pid) {
		return
	}
	for i := range snap.Threads {
		t := &snap.Threads[i]
		frames, fresh := r.Frames(pid, uint32(t.Tid), 0)
		t.Python = append([]format.PyFrame(nil), frames...)
		if t.GIL = r.GIL; t.GIL == format.PyGILNone && r.WaitingGIL(pid, t.PCs) {
			t.GIL = format.PyGILWaiting
		}
		for _, code := range fresh {
			code.Lines = append([]byte(nil), code.Lines...)
			snap.PyCodes = append(snap.PyCodes, code)
		}
	}
}
