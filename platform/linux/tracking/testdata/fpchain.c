// fpchain: a few small functions calling each other, built with and
// without frame pointers for the --unwind auto heuristic.
#include <stdio.h>
#include <stdlib.h>

volatile unsigned long sink;

__attribute__((noinline)) unsigned long f3(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < n; i++)
		x = x * 31 + i;
	printf("%lu\n", x);
	return x;
}
__attribute__((noinline)) unsigned long f2(unsigned long n) { unsigned long r = f3(n); sink += r; return r + 1; }
__attribute__((noinline)) unsigned long f1(unsigned long n) { unsigned long r = f2(n); sink += r; return r + 1; }
__attribute__((noinline)) unsigned long f0(unsigned long n) { unsigned long r = f1(n); sink += r; return r + 1; }

int main(int argc, char **argv) {
	sink = f0(argc > 1 ? strtoul(argv[1], 0, 10) : 10);
	return 0;
}
