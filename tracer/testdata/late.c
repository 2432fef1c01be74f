// late is a shared library that forkdl loads with dlopen after start.
#include <time.h>

volatile unsigned long late_sink;

// late_spin burns secs seconds of the calling thread's CPU time.
__attribute__((noinline)) void late_spin(double secs) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	double end = ts.tv_sec + ts.tv_nsec * 1e-9 + secs, t;
	unsigned long x = 1;
	do {
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005UL + i;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
		t = ts.tv_sec + ts.tv_nsec * 1e-9;
	} while (t < end);
	late_sink = x;
}
