// Package cpython reads, for a Linux session's sample of a CPython
// thread, the thread's Python frames out of the target's memory, as
// py-spy and CPython 3.14's _remote_debugging do: nothing is asked of the
// target (no flag, no -X perf, no module).
//
// The interpreter is found in the python executable or the libpython it
// maps, by its symbols: _PyRuntime (the runtime state), PyCode_Type (to
// check that a pointer is a code object) and Py_Version (the version).
// From _PyRuntime the reader walks interpreters → thread states, finds
// the one whose native_thread_id is the sampled thread (3.8–3.10 have
// only thread_id, a pthread_t: the tid is read from glibc's struct pthread
// it points to, on x86-64), and follows its current frame (through cframe
// on 3.11 and 3.12) back through _PyInterpreterFrame.previous (3.8–3.10:
// PyFrameObject.f_back, each frame run by its own
// _PyEval_EvalFrameDefault call). Each frame gives its code object and the
// offset of its current instruction; each code object is read once
// (qualified name, file name, first line, line table) and interned as a
// format.PyCode. Frames owned by the C stack (the shim each
// _PyEval_EvalFrameDefault call pushes, 3.12+) or flagged is_entry (3.11)
// mark where one native evaluation frame's Python frames begin, so the
// symbolizer can splice them into the native stack.
//
// Offsets: CPython 3.13 publishes them in _Py_DebugOffsets, at the start
// of _PyRuntime (section .PyRuntime, cookie "xdebugpy"), read from the
// file. For 3.8 to 3.12 they come from per-version tables (layout.go)
// taken from the headers' layout, which CPython keeps fixed within a
// minor version: a new patch release uses its minor's table, and a
// table that does not fit the live process (no thread state carries a
// thread of the process) gives native-only stacks and one warning, never
// wrong frames. Versions before 3.8 and after 3.13 are not read: their
// samples keep native-only stacks and the session warns once. The
// version is Py_Version's (3.11+) or, before it existed, the one the
// libpython or python file name says.
//
// The GIL: with a thread's state, in the same read, the reader reads its
// interpreter's GIL (struct _gil_runtime_state: _PyRuntime.ceval.gil in
// 3.8–3.11, the interpreter's ceval.gil pointer from 3.12) and reports
// [format.PyGILHeld] when it is locked and its last_holder is the
// thread's state ([Reader.GIL]). A thread whose native stack is in the
// interpreter's take_gil (found by symbol, or in the debug file a build
// id names) is waiting for it ([Reader.WaitingGIL]). In a recording the
// GIL is read when the frames are, a few milliseconds after the sample.
//
// A read never trusts the target: every read is process_vm_readv, which
// fails instead of faulting; a code object must have PyCode_Type as its
// type, an instruction offset must lie inside its code, a chain is at
// most [MaxDepth] frames and may not visit a frame twice. A chain that
// fails is cut there, and the cut is counted by reason ([Stats]); no
// frame is ever made up. A sample costs one read of the thread state
// (and of its cframe), then one of each frame and one of its code
// object's header; the code objects' strings are read once per object.
package cpython
