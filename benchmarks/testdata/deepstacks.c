/* A CPU-bound workload whose samples have many distinct deep stacks:
 * pseudo-random recursion 20-31 levels deep through two call sites along
 * 256 paths (real programs repeat their stacks), then a leaf loop. Built with frame pointers so perf -g and rawstack both see the
 * whole chain. Usage: deepstacks SECONDS */
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) void leaf(unsigned long n) {
	for (unsigned long i = 0; i < n; i++)
		sink += i * i;
}

__attribute__((noinline)) void rec(int depth, unsigned seed) {
	if (depth == 0) {
		leaf(2000 + (seed % 7) * 300);
		return;
	}
	if (seed & 1)
		rec(depth - 1, seed * 1103515245u + 12345u);
	else
		rec(depth - 1, (seed >> 1) * 2654435761u + 1);
	sink++; /* no tail call: keep every frame */
}

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 1;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (unsigned long i = 0;; i++) {
		rec(20 + (i % 12), (unsigned)(i % 256));
		if ((i & 63) == 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= secs)
				break;
		}
	}
	return 0;
}
