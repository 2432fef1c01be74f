// deep recurses argv[2] frames deep, then spins for argv[1] seconds of CPU
// time, so its call chains are longer than the kernel's default limit.
#include <stdlib.h>
#include <time.h>

static double cpu(void) {
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

volatile unsigned long sink;

__attribute__((noinline)) unsigned long recurse(int n, double secs) {
	if (n == 0) {
		double end = cpu() + secs;
		unsigned long x = 1;
		while (cpu() < end)
			for (int i = 0; i < 1000000; i++)
				x = x * 6364136223846793005UL + i;
		return x;
	}
	unsigned long r = recurse(n - 1, secs);
	sink += r;
	return r + 1;
}

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 0.5;
	int depth = argc > 2 ? atoi(argv[2]) : 300;
	sink = recurse(depth, secs);
	return 0;
}
