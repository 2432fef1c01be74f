// chain spends argv[1] seconds of CPU time in main -> a -> b -> c (CPU
// time, not wall time, so a loaded machine yields the same sample count).
#include <stdlib.h>
#include <time.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

volatile unsigned long sink;
volatile unsigned long iters = 5000000;

// publish keeps c from being a leaf: GCC sets up no frame in leaf
// functions even with -fno-omit-frame-pointer, which would hide b.
__attribute__((noinline)) void publish(unsigned long x) {
	sink = x;
	__asm__ volatile("");
}

__attribute__((noinline)) unsigned long c(unsigned long n) {
	unsigned long x = 1;
	for (unsigned long i = 0; i < n; i++)
		x = x * 6364136223846793005UL + (i ^ (x >> 7));
	publish(x);
	return x;
}

__attribute__((noinline)) unsigned long b(unsigned long n) {
	unsigned long r = c(n);
	sink += r;
	return r + 1;
}

__attribute__((noinline)) unsigned long a(unsigned long n) {
	unsigned long r = b(n);
	sink += r;
	return r + 1;
}

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
	double end = now() + secs;
	unsigned long t = 0;
	while (now() < end)
		t += a(iters);
	sink = t;
	return 0;
}
