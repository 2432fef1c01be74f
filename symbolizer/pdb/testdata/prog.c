#include "util.h"

volatile unsigned sink;

__attribute__((noinline)) unsigned hash_buf(const unsigned char *p, int n) {
	unsigned h = 17;
	for (int i = 0; i + 2 < n; i += 3) {
		h = mix3(h, p[i], p[i + 1]);
		if (p[i + 2] & 1)
			h = mix(h, p[i + 2]);
	}
	return h;
}

static int fib(int n) {
	if (n < 2)
		return n;
	return fib(n - 1) + fib(n - 2);
}

__attribute__((noinline)) int work(int n) {
	unsigned char buf[64];
	for (int i = 0; i < 64; i++)
		buf[i] = (unsigned char)(i * n);
	sink = hash_buf(buf, 64);
	return fib(n) + (int)sink;
}

int run_shapes(int n);
int run_interp(int n);

int main(int argc, char **argv) {
	(void)argv;
	int r = 0;
	for (int i = 0; i < argc + 10; i++)
		r += work(i);
	return (r + run_shapes(argc) + run_interp(argc)) & 1;
}
