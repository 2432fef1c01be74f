// chainpriv is the native program of the container tests: it runs inside
// its own mount and pid namespaces, at a path the host does not have,
// spending its time in main -> alpha_step -> beta_step -> gamma_step for
// the seconds given (default 3). Built -O2 -g -fno-omit-frame-pointer.
#include <stdlib.h>
#include <time.h>

#ifndef BUILD
#define BUILD 0
#endif

/* BUILD makes builds of one source with other build ids. */
static volatile unsigned long sink = BUILD;

__attribute__((noinline)) static unsigned long gamma_step(unsigned long x) {
	for (int i = 0; i < 20000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) static unsigned long beta_step(unsigned long x) {
	unsigned long r = gamma_step(x);
	__asm__ volatile("" ::: "memory");
	return r + 1;
}

__attribute__((noinline)) static unsigned long alpha_step(unsigned long x) {
	unsigned long r = beta_step(x);
	__asm__ volatile("" ::: "memory");
	return r + 1;
}

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 3;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	unsigned long x = 1;
	do {
		x = alpha_step(x);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < secs);
	sink = x;
	return 0;
}
