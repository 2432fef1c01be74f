// ebpf_sleep sleeps argv[2] times argv[1] seconds in main -> waiter ->
// nap (nanosleep), and prints the total wall time it spent in nap, in
// nanoseconds, measured with CLOCK_MONOTONIC: the oracle for the off-CPU
// weight a profiler attributes to that chain. Built with
// -fomit-frame-pointer.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

volatile long sink;

__attribute__((noinline)) long long nap(double secs) {
	struct timespec req = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
	long long t0 = ns();
	nanosleep(&req, 0);
	long long d = ns() - t0;
	sink += d;
	return d;
}

__attribute__((noinline)) long long waiter(double secs, int n) {
	long long total = 0;
	for (int i = 0; i < n; i++)
		total += nap(secs);
	sink += total;
	return total;
}

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 0.2;
	int n = argc > 2 ? atoi(argv[2]) : 5;
	printf("%lld\n", waiter(secs, n));
	return 0;
}
