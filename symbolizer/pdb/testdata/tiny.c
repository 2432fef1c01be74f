// Source of testdata/tiny.pdb, the fuzz seed: one function with an inlined
// call, built with
//   clang --target=x86_64-pc-windows-msvc -O2 -g -gcodeview -c tiny.c
//   lld-link /dll /noentry /nodefaultlib /debug /pdb:tiny.pdb tiny.obj
// and repacked into 512-byte blocks by TestWriteTinySeed -update.
static inline int sq(int x) {
	return x * x;
}

__declspec(dllexport) int f(int a) {
	int s = 0;
	for (int i = 0; i < a; i++)
		s += sq(i) ^ a;
	return s;
}
