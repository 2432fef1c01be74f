/* An allocation-heavy workload for the alloc scenario: N rounds of
 * malloc of 16..4111 bytes, a memset of the block, and the free of the
 * block allocated 1024 rounds earlier (so about 2 MiB stay live).
 *
 * usage: allocload run N
 *   run   prints the loop's nanoseconds, then the nanoseconds from the
 *         process's start to the end of the loop: from its first
 *         function (.preinit_array, which runs before the constructors
 *         of every library, what a profiler preloads included) on; then
 *         the CPU time the process used until then (user and system,
 *         which counts a profiler's work in its probes). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define LIVE 1024

static void *ring[LIVE];

static long long now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long long start;

static void stamp(void)
{
	start = now();
}

__attribute__((section(".preinit_array"), used)) static void (*const preinit)(void) = stamp;

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
	if (argc != 3) {
		fprintf(stderr, "usage: allocload run N\n");
		return 2;
	}
	long n = atol(argv[2]);
	unsigned x = 12345;
	long long a = now();
	for (long i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		size_t sz = 16 + ((x >> 8) & 4095);
		free(ring[i % LIVE]);
		ring[i % LIVE] = make(sz);
	}
	long long b = now();
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	long long cpu = (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
			(long long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
	printf("%lld %lld %lld\n", b - a, b - start, cpu);
	return 0;
}
