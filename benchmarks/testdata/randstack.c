// randstack runs argv[1] seconds of CPU time in stacks that rarely repeat:
// each round recurses to a random depth of 1-200 through four functions
// chosen at random at every level, and spins a little at the bottom, so
// almost every sample has a stack never seen before. The recorder's
// intern tables grow with it unless they are capped.
#include <stdlib.h>
#include <time.h>

static double cpu(void) {
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

volatile unsigned long sink;
static unsigned long rng = 88172645463325252UL;
static unsigned long next(void) {
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

typedef unsigned long (*fn)(int);
static fn fns[4];

static unsigned long spin(void) {
	unsigned long x = next();
	for (int i = 0; i < 20000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

#define F(name)                                                   \
	__attribute__((noinline)) unsigned long name(int d) {     \
		unsigned long r = d == 0 ? spin() : fns[next() & 3](d - 1); \
		sink += r;                                        \
		return r + 1;                                     \
	}
F(f0)
F(f1)
F(f2)
F(f3)

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
	fns[0] = f0, fns[1] = f1, fns[2] = f2, fns[3] = f3;
	double t0 = cpu();
	while (cpu() - t0 < secs)
		for (int i = 0; i < 100; i++)
			f0(next() % 200);
	return 0;
}
