// Windows arm64 fixture: functions whose prologs need packed and unpacked
// unwind data of different shapes (saved x19-x28 pairs, d8-d15, homed
// varargs registers, frame pointers, large frames). Built with clang for
// aarch64-pc-windows-msvc and lld-link; llvm-readobj --unwind is the
// oracle for the decoder.
#include <stdarg.h>

volatile int sink;
volatile double dsink;

void __chkstk(void) {}

__attribute__((noinline)) int leaf(int a) { return a * 3; }

__attribute__((noinline)) int two(int a, int b) {
	int x = leaf(a) + leaf(b);
	sink = x;
	return x + leaf(x);
}

__attribute__((noinline)) int many(int a, int b, int c, int d, int e, int f, int g, int h) {
	// Ten values live across calls: x19-x28 all saved.
	int p = leaf(a), q = leaf(b), r = leaf(c), s = leaf(d), t = leaf(e);
	int u = leaf(f), v = leaf(g), w = leaf(h), y = leaf(p + q), z = leaf(r + s);
	sink = p;
	return p + q + r + s + t + u + v + w + y + z + leaf(t + u + v + w + y + z);
}

__attribute__((noinline)) double floats(double a, double b, double c) {
	double x = a * 2, y = b * 3, z = c * 4, w = a + b + c;
	sink = leaf((int)a);
	return x * y + z * w + x + y + z;
}

__attribute__((noinline)) int var(int n, ...) {
	va_list ap;
	va_start(ap, n);
	int s = 0;
	for (int i = 0; i < n; i++)
		s += va_arg(ap, int);
	va_end(ap);
	return s + leaf(s);
}

__attribute__((noinline)) int big(int n) {
	volatile char buf[6000];
	buf[n] = 1;
	return buf[n + 1] + two(n, n);
}

__attribute__((noinline)) int huge(int n) {
	volatile char buf[70000];
	buf[n] = 1;
	return buf[n + 1] + two(n, n);
}

__attribute__((noinline)) int dyn(int n) {
	volatile char *p = __builtin_alloca(n);
	p[0] = 1;
	return p[0] + big(n) + many(n, 1, 2, 3, 4, 5, 6, 7);
}

int main(int argc, char **argv) {
	(void)argv;
	dsink = floats(argc, 2, 3);
	return dyn(argc) + var(3, 1, 2, 3) + huge(argc);
}
