/* An allocation-heavy workload for the alloc scenario: N rounds of
 * malloc of 16..4111 bytes, a memset of the block, and the free of the
 * block allocated 1024 rounds earlier (so about 2 MiB stay live). Prints
 * the nanoseconds its loop took, so that a profiler's start-up and
 * shutdown are not counted. usage: allocload N */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIVE 1024

static void *ring[LIVE];

__attribute__((noinline)) static void *make(size_t n)
{
	char *p = malloc(n);
	if (!p)
		abort();
	memset(p, (int)n, n);
	return p;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	unsigned x = 12345;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		size_t sz = 16 + ((x >> 8) & 4095);
		free(ring[i % LIVE]);
		ring[i % LIVE] = make(sz);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
	return 0;
}
