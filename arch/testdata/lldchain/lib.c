// lib.c is liblldchain.so: lib_a -> lib_b -> lib_c, where lib_c spins.
// Linked with lld (-fuse-ld=lld) and small, its read-only PT_LOAD
// segment and its code segment start in the same file page while their
// link-time addresses are a page apart (p_vaddr != p_offset for the
// R E segment): the layout that tells a load bias computed from the
// wrong segment.
#include <time.h>

volatile unsigned long lib_sink;

static double lib_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// lib_c spins for secs seconds of CPU time with rbp holding data.
__attribute__((noinline)) unsigned long lib_c(double secs) {
	double end = lib_now() + secs;
	unsigned long x0 = 1, x1 = 3, x2 = 5, x3 = 7, x4 = 11, x5 = 13, x6 = 17;
	while (lib_now() < end) {
		for (unsigned long i = 0; i < 100000; i++) {
			x0 = x0 * 6364136223846793005UL + (i ^ x6);
			x1 = x1 * 2862933555777941757UL + (x0 >> 7);
			x2 ^= x1 + (x2 << 3);
			x3 += x2 ^ (x3 >> 5);
			x4 = x4 * 3935559000370003845UL + x3;
			x5 ^= x4 >> 11;
			x6 += x5 * 0x9e3779b97f4a7c15UL;
		}
	}
	return x0 ^ x1 ^ x2 ^ x3 ^ x4 ^ x5 ^ x6;
}

__attribute__((noinline)) unsigned long lib_b(double secs) {
	unsigned long r = lib_c(secs);
	lib_sink += r;
	return r + 1;
}

__attribute__((noinline)) unsigned long lib_a(double secs) {
	unsigned long r = lib_b(secs);
	lib_sink += r;
	return r + 1;
}
