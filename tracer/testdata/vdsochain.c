// vdsochain calls the vDSO's clock_gettime from main -> a -> b -> spin,
// 400 * argv[1] times 100000 times (about a second of CPU per unit).
// It counts rounds rather than reading a CPU-time clock, whose
// clock_gettime would be a second path into the vDSO from main.
#include <time.h>
#include <stdlib.h>
volatile unsigned long sink;
__attribute__((noinline)) unsigned long spin(unsigned long n) {
	struct timespec ts;
	unsigned long x = 0;
	for (unsigned long i = 0; i < n; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		x += ts.tv_nsec;
	}
	return x;
}
__attribute__((noinline)) unsigned long b(unsigned long n) { unsigned long r = spin(n); sink += r; return r + 1; }
__attribute__((noinline)) unsigned long a(unsigned long n) { unsigned long r = b(n); sink += r; return r + 1; }
int main(int argc, char **argv) {
	long rounds = (long)(400 * (argc > 1 ? atof(argv[1]) : 1.0));
	for (long i = 0; i < rounds; i++)
		sink += a(100000);
	return 0;
}
