// dwarfchain spends argv[1] seconds of CPU time in the leaf of
// main -> a -> b -> c -> d -> e -> leaf. Built with -O2
// -fomit-frame-pointer, no function keeps a frame pointer: rbp is a
// general register, so only CFI recovers the chain. argv[2], if given,
// is a number of seconds to sleep first.
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

volatile unsigned long sink;
volatile unsigned long iters = 5000000;

// leaf uses many registers (rbp among them) so that the frame pointer
// holds data, not a frame address.
__attribute__((noinline)) unsigned long leaf(unsigned long n) {
	unsigned long x0 = 1, x1 = 3, x2 = 5, x3 = 7, x4 = 11, x5 = 13, x6 = 17, x7 = 19;
	for (unsigned long i = 0; i < n; i++) {
		x0 = x0 * 6364136223846793005UL + (i ^ x7);
		x1 = x1 * 2862933555777941757UL + (x0 >> 7);
		x2 ^= x1 + (x2 << 3);
		x3 += x2 ^ (x3 >> 5);
		x4 = x4 * 3935559000370003845UL + x3;
		x5 ^= x4 >> 11;
		x6 += x5 * 0x9e3779b97f4a7c15UL;
		x7 ^= x6 + i;
	}
	return x0 ^ x1 ^ x2 ^ x3 ^ x4 ^ x5 ^ x6 ^ x7;
}

#define LEVEL(name, callee)                                            \
	__attribute__((noinline)) unsigned long name(unsigned long n) { \
		unsigned long r = callee(n);                            \
		sink += r;                                              \
		return r + 1;                                           \
	}

LEVEL(e, leaf)
LEVEL(d, e)
LEVEL(c, d)
LEVEL(b, c)
LEVEL(a, b)

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
	if (argc > 2)
		usleep((useconds_t)(atof(argv[2]) * 1e6));
	double end = now() + secs;
	unsigned long t = 0;
	while (now() < end)
		t += a(iters / 8);
	sink = t;
	return 0;
}
