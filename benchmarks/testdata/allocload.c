/* An allocation-heavy workload for the alloc scenario: N rounds of
 * malloc of 16..4111 bytes, a memset of the block, and the free of the
 * block allocated 1024 rounds earlier (so about 2 MiB stay live).
 *
 * usage: allocload e2e N | run N | wait N
 *   e2e   stamps the time and executes itself (run), so that its time
 *         counts the process's start: the exec, the dynamic loader and
 *         what a profiler preloads; prints the loop's nanoseconds, then
 *         the nanoseconds from the stamp to the end of the loop.
 *   run   prints the loop's nanoseconds (and, under e2e, the above).
 *   wait  waits until malloc carries a breakpoint (a recorder attached
 *         by pid has put its uprobe there), then runs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
		fprintf(stderr, "usage: allocload e2e|run|wait N\n");
		return 2;
	}
	long n = atol(argv[2]);
	if (strcmp(argv[1], "e2e") == 0) {
		char t0[32];
		snprintf(t0, sizeof(t0), "%lld", now());
		setenv("ALLOCLOAD_T0", t0, 1);
		char *args[] = {argv[0], "run", argv[2], NULL};
		execv("/proc/self/exe", args);
		perror("execv");
		return 1;
	}
	if (strcmp(argv[1], "wait") == 0) {
		volatile unsigned char *m = (volatile unsigned char *)dlsym(RTLD_DEFAULT, "malloc");
		long long give_up = now() + 30000000000LL;
		while (*m != 0xcc) {
			if (now() > give_up) {
				fprintf(stderr, "allocload: no breakpoint on malloc after 30 s\n");
				return 1;
			}
			usleep(1000);
		}
		usleep(200000); /* the other allocator functions' uprobes */
	}
	unsigned x = 12345;
	long long a = now();
	for (long i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		size_t sz = 16 + ((x >> 8) & 4095);
		free(ring[i % LIVE]);
		ring[i % LIVE] = make(sz);
	}
	long long b = now();
	const char *t0 = getenv("ALLOCLOAD_T0");
	if (t0)
		printf("%lld %lld\n", b - a, b - atoll(t0));
	else
		printf("%lld\n", b - a);
	return 0;
}
