// recordload is the CPU-bound C++ workload of the record benchmark: it
// sorts vectors under a chain of eight template frames, argv[1] rounds,
// and prints the wall and CPU time of its work ("elapsed_ns N cpu_ns M")
// on stderr. CPU time includes the sampling interrupts charged to it and is
// less disturbed by other load on the machine than wall time.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

static unsigned long sink;

__attribute__((noinline)) static unsigned long leaf(std::vector<unsigned> &v, unsigned seed) {
	for (auto &x : v) {
		seed = seed * 1664525u + 1013904223u;
		x = seed;
	}
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

template <int N> struct deep {
	__attribute__((noinline)) static unsigned long run(std::vector<unsigned> &v, unsigned seed) {
		unsigned long r = deep<N - 1>::run(v, seed + N);
		sink += r;
		return r + 1;
	}
};

template <> struct deep<0> {
	__attribute__((noinline)) static unsigned long run(std::vector<unsigned> &v, unsigned seed) {
		return leaf(v, seed);
	}
};

int main(int argc, char **argv) {
	int rounds = argc > 1 ? atoi(argv[1]) : 100;
	std::vector<unsigned> v(100000);
	timespec a, b, ca, cb;
	clock_gettime(CLOCK_MONOTONIC, &a);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ca);
	unsigned long r = 0;
	for (int i = 0; i < rounds; i++)
		r += deep<8>::run(v, i);
	clock_gettime(CLOCK_MONOTONIC, &b);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cb);
	sink += r;
	fprintf(stderr, "elapsed_ns %lld cpu_ns %lld\n",
	        (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec),
	        (long long)(cb.tv_sec - ca.tv_sec) * 1000000000LL + (cb.tv_nsec - ca.tv_nsec));
	return 0;
}
