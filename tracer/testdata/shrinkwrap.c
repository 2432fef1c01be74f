// main -> a -> b -> c for argv[1] seconds of CPU time, built with gcc -O2
// -fno-omit-frame-pointer. c is shrink-wrapped: its hot loop runs before it pushes a frame, so a
// kernel frame-pointer chain taken there skips b. It prints its CPU time to stderr as
// "cpu_ns N" for the benchmarks' slowdown figures.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) void slow(unsigned long v) { printf("%lu\n", v); }

__attribute__((noinline)) unsigned long c(unsigned long n) {
	unsigned long x = n;
	for (unsigned long i = 0; i < 20000000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	if (__builtin_expect(x == 42, 0))
		slow(x); // only this path needs a frame
	return x;
}

__attribute__((noinline)) unsigned long b(unsigned long n) { unsigned long r = c(n) + 1; sink = r; return r; }
__attribute__((noinline)) unsigned long a(unsigned long n) { unsigned long r = b(n) + 1; sink = r; return r; }

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 1;
	struct timespec t0, t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
	unsigned long n = 0;
	do {
		n += a(n);
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	sink = n;
	fprintf(stderr, "cpu_ns %lld\n", (long long)t.tv_sec * 1000000000LL + t.tv_nsec);
	return 0;
}
