/* A stand-in for an interpreter: its evaluation loop has CPython's name,
   so that a stream's Python frames are spliced at its frames. */
__attribute__((noinline)) int callee(int x) { return x * 3 + 1; }
__attribute__((noinline)) int _PyEval_EvalFrameDefault(int x) { return callee(x) + 1; }
int main(int argc, char **argv) { (void)argv; return _PyEval_EvalFrameDefault(argc); }
