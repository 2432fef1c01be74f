// deep.c: a known deep call chain for the unwinder tests, built with
// -O2 -fomit-frame-pointer. Each level has a different frame shape (no
// frame, a big frame, an alloca frame addressed through rbp, recursion,
// a call through libc's qsort) and the chain ends in marker(), where the
// test's debugger stops and dumps registers and stack.
#include <alloca.h>
#include <stdlib.h>
#include <string.h>

volatile int sink;

__attribute__((noinline)) void marker(int v) { sink = v; __asm__ volatile("" ::: "memory"); }

__attribute__((noinline)) int leaf(int n) {
	marker(n);
	return n + 1;
}

__attribute__((noinline)) int with_alloca(int n) {
	char *p = alloca(64 + (n & 255));
	memset(p, n, 64 + (n & 255));
	int r = leaf(p[3] + n);
	return r + p[7];
}

static int depth_left;

__attribute__((noinline)) int cmp(const void *a, const void *b) {
	if (depth_left > 0) {
		depth_left = 0;
		sink = with_alloca(*(const int *)a);
	}
	return *(const int *)a - *(const int *)b;
}

__attribute__((noinline)) int via_qsort(int n) {
	int v[4] = {n, 3, 2, 1};
	depth_left = 1;
	qsort(v, 4, sizeof v[0], cmp);
	return v[0] + v[3];
}

__attribute__((noinline)) int recurse(int n) {
	if (n == 0)
		return via_qsort(n + 40);
	int r = recurse(n - 1);
	sink = r;
	return r + n;
}

__attribute__((noinline)) int big_frame(int n) {
	volatile char buf[4096];
	buf[n & 4095] = (char)n;
	int r = recurse(5);
	return r + buf[(n * 7) & 4095];
}

__attribute__((noinline)) int no_frame(int n) { return big_frame(n + 1) * 3; }

int main(int argc, char **argv) {
	(void)argv;
	return no_frame(argc) & 1;
}
