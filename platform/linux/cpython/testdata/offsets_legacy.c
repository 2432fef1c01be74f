/* Prints the field offsets and struct sizes rawstack reads from CPython
 * 3.8–3.10 (PyFrameObject), as the headers lay them out:
 * TestTablesMatchHeaders compiles it against each installed version and
 * compares with layout.go. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x03090000
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#else
#include "internal/pycore_pystate.h"
#endif
#define P(name, expr) printf("%s %zu\n", name, (size_t)(expr))
int main(void) {
  printf("version %#lx\n", (unsigned long)PY_VERSION_HEX);
  P("runtime.interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
  P("interp.threads_head", offsetof(PyInterpreterState, tstate_head));
  P("tstate.next", offsetof(PyThreadState, next));
  P("tstate.thread_id", offsetof(PyThreadState, thread_id));
  P("tstate.frame", offsetof(PyThreadState, frame));
  P("frame.code", offsetof(PyFrameObject, f_code));
  P("frame.previous", offsetof(PyFrameObject, f_back));
  P("frame.lasti", offsetof(PyFrameObject, f_lasti));
  P("code.name", offsetof(PyCodeObject, co_name));
  P("code.filename", offsetof(PyCodeObject, co_filename));
  P("code.firstlineno", offsetof(PyCodeObject, co_firstlineno));
#if PY_VERSION_HEX >= 0x030a0000
  P("code.linetable", offsetof(PyCodeObject, co_linetable));
#else
  P("code.linetable", offsetof(PyCodeObject, co_lnotab));
#endif
  P("code.code", offsetof(PyCodeObject, co_code));
  P("unicode.length", offsetof(PyASCIIObject, length));
  P("unicode.state", offsetof(PyASCIIObject, state));
  P("unicode.ascii_size", sizeof(PyASCIIObject));
  P("unicode.compact_size", sizeof(PyCompactUnicodeObject));
  P("bytes.size", offsetof(PyVarObject, ob_size));
  P("bytes.sval", offsetof(PyBytesObject, ob_sval));
  P("runtime.gil", offsetof(_PyRuntimeState, ceval.gil));
  P("gil.last_holder", offsetof(struct _gil_runtime_state, last_holder));
  P("gil.locked", offsetof(struct _gil_runtime_state, locked));
  return 0;
}
