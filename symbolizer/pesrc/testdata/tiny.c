/* A tiny PE with DWARF in long-named sections and a COFF symbol table:
   the seed of pesrc's fuzz test. Built with
   x86_64-w64-mingw32-gcc -O2 -g -nostdlib -e start -o tiny-dwarf.exe tiny.c */
static inline int sq(int v) { return v * v; }
static int sum(const int *p, int n) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += sq(p[i]);
	return s;
}
volatile int out;
int start(void) {
	int a[4] = {1, 2, 3, 4};
	out = sum(a, 4);
	return 0;
}
