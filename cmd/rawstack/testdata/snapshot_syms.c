// snapshot_syms.c: a binary with known function symbols for the snapshot
// command's printing test; it is never run.
__attribute__((noinline)) int inner(int x) { return x * 3 + 1; }
__attribute__((noinline)) int outer(int x) { return inner(x) + 2; }
int main(int argc, char **argv) { (void)argv; return outer(argc); }
