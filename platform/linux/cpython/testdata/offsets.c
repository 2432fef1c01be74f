/* Prints the field offsets and struct sizes rawstack reads, as this
 * CPython's headers lay them out: TestTablesMatchHeaders compiles it
 * against each installed version and compares with layout.go. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#define P(name, expr) printf("%s %zu\n", name, (size_t)(expr))
int main(void) {
  printf("version %#lx\n", (unsigned long)PY_VERSION_HEX);
  P("runtime.interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
  P("interp.threads_head", offsetof(PyInterpreterState, threads.head));
  P("tstate.next", offsetof(PyThreadState, next));
  P("tstate.native_thread_id", offsetof(PyThreadState, native_thread_id));
#if PY_VERSION_HEX >= 0x030d0000
  P("tstate.current_frame", offsetof(PyThreadState, current_frame));
  P("frame.code", offsetof(_PyInterpreterFrame, f_executable));
  P("frame.instr", offsetof(_PyInterpreterFrame, instr_ptr));
#else
  P("tstate.cframe", offsetof(PyThreadState, cframe));
  P("cframe.current_frame", offsetof(_PyCFrame, current_frame));
  P("frame.code", offsetof(_PyInterpreterFrame, f_code));
  P("frame.instr", offsetof(_PyInterpreterFrame, prev_instr));
#endif
#if PY_VERSION_HEX < 0x030c0000
  P("frame.is_entry", offsetof(_PyInterpreterFrame, is_entry));
#endif
  P("frame.previous", offsetof(_PyInterpreterFrame, previous));
  P("frame.owner", offsetof(_PyInterpreterFrame, owner));
  P("code.size", offsetof(PyVarObject, ob_size));
  P("code.qualname", offsetof(PyCodeObject, co_qualname));
  P("code.filename", offsetof(PyCodeObject, co_filename));
  P("code.firstlineno", offsetof(PyCodeObject, co_firstlineno));
  P("code.linetable", offsetof(PyCodeObject, co_linetable));
  P("code.code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
  P("unicode.length", offsetof(PyASCIIObject, length));
  P("unicode.state", offsetof(PyASCIIObject, state));
  P("unicode.ascii_size", sizeof(PyASCIIObject));
  P("unicode.compact_size", sizeof(PyCompactUnicodeObject));
  P("bytes.size", offsetof(PyVarObject, ob_size));
  P("bytes.sval", offsetof(PyBytesObject, ob_sval));
#if PY_VERSION_HEX >= 0x030c0000
  P("interp.ceval_gil", offsetof(PyInterpreterState, ceval.gil));
#else
  P("runtime.gil", offsetof(_PyRuntimeState, ceval.gil));
#endif
  P("gil.last_holder", offsetof(struct _gil_runtime_state, last_holder));
  P("gil.locked", offsetof(struct _gil_runtime_state, locked));
  return 0;
}
