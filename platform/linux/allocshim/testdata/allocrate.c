/* A running service to attach the allocation sampler to: THREADS
 * threads (the first argument, default 2) allocate flat out in
 * main -> spin_thread -> spin (malloc of 16 to 4111 bytes, a pattern
 * written, checked, free), each counting its rounds, while the main
 * thread answers commands on its standard input, one a line:
 *
 *   rate MS   prints "rate R": the spinning threads' rounds per second of
 *             their own CPU time over the next MS milliseconds (their
 *             throughput, whatever else the machine runs)
 *   go        main -> churn allocates and frees 1 GiB in 16 KiB blocks,
 *             main -> keep allocates 128 MiB in 1 MiB blocks and keeps
 *             them; prints "done"
 *   check     checks every kept block's pattern; prints "ok" (or exits
 *             with status 3)
 *   free      frees the kept blocks; prints "freed"
 *   fork      forks a child that allocates, then execs /bin/true;
 *             prints "forked STATUS" once it has ended
 *
 * and exits 0 at the end of its input. A block whose pattern is not the
 * one written (a sampler that broke the allocator) exits with status 3.
 * Prints "ready" once the threads run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHURN_TOTAL (1ull << 30)
#define CHURN_BLOCK (16u << 10)
#define KEEP_TOTAL (128u << 20)
#define KEEP_BLOCK (1u << 20)
#define MAX_THREADS 16

static char *kept[KEEP_TOTAL / KEEP_BLOCK];
volatile char sink;

struct counter {
	volatile uint64_t rounds;
	pthread_t th;
	char pad[48];
} __attribute__((aligned(64)));
static struct counter counters[MAX_THREADS];
static int nthreads = 2;

static void bad(const char *what)
{
	fprintf(stderr, "allocrate: %s\n", what);
	exit(3);
}

__attribute__((noinline)) void spin(struct counter *c, uint64_t *seed)
{
	for (int i = 0; i < 1024; i++) {
		*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
		size_t n = 16 + (size_t)((*seed >> 33) % 4096);
		unsigned char *p = malloc(n);
		if (!p)
			bad("malloc failed");
		unsigned char v = (unsigned char)(*seed >> 20);
		p[0] = v;
		p[n - 1] = v ^ 0x5a;
		sink = (char)p[n / 2];
		if (p[0] != v || p[n - 1] != (unsigned char)(v ^ 0x5a))
			bad("a block changed under the program");
		free(p);
	}
	c->rounds += 1024;
}

__attribute__((noinline)) void *spin_thread(void *arg)
{
	struct counter *c = arg;
	uint64_t seed = (uint64_t)(uintptr_t)arg;
	for (;;)
		spin(c, &seed);
	return NULL;
}

__attribute__((noinline)) void churn(void)
{
	for (unsigned long long done = 0; done < CHURN_TOTAL; done += CHURN_BLOCK) {
		char *p = malloc(CHURN_BLOCK);
		if (!p)
			bad("malloc failed");
		p[0] = (char)done;
		sink = p[0];
		free(p);
	}
}

__attribute__((noinline)) void keep(void)
{
	for (unsigned i = 0; i < KEEP_TOTAL / KEEP_BLOCK; i++) {
		kept[i] = malloc(KEEP_BLOCK);
		if (!kept[i])
			bad("malloc failed");
		memset(kept[i], (int)(i * 7 + 1), KEEP_BLOCK);
	}
}

static void check(void)
{
	for (unsigned i = 0; i < KEEP_TOTAL / KEEP_BLOCK; i++) {
		if (!kept[i])
			continue;
		for (unsigned j = 0; j < KEEP_BLOCK; j += 4093)
			if (kept[i][j] != (char)(i * 7 + 1))
				bad("a kept block changed");
	}
}

static double thread_cpu(void)
{
	double s = 0;
	for (int i = 0; i < nthreads; i++) {
		clockid_t id;
		struct timespec ts;
		if (pthread_getcpuclockid(counters[i].th, &id) == 0 && clock_gettime(id, &ts) == 0)
			s += (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	}
	return s;
}

static uint64_t rounds(void)
{
	uint64_t n = 0;
	for (int i = 0; i < nthreads; i++)
		n += counters[i].rounds;
	return n;
}

__attribute__((noinline)) static void forked(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		for (int i = 0; i < 1000; i++)
			free(malloc(4096 + (size_t)i));
		execl("/bin/true", "true", (char *)NULL);
		_exit(127);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	printf("forked %d\n", st);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		nthreads = atoi(argv[1]);
	if (nthreads < 1 || nthreads > MAX_THREADS)
		nthreads = 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; i < nthreads; i++)
		if (pthread_create(&counters[i].th, NULL, spin_thread, &counters[i]) != 0)
			bad("pthread_create failed");
	printf("ready\n");
	char line[64];
	while (fgets(line, sizeof(line), stdin)) {
		if (strncmp(line, "rate ", 5) == 0) {
			long ms = atol(line + 5);
			uint64_t n0 = rounds();
			double c0 = thread_cpu();
			struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
			nanosleep(&ts, NULL);
			uint64_t n1 = rounds();
			double c1 = thread_cpu();
			printf("rate %.0f\n", c1 > c0 ? (double)(n1 - n0) / (c1 - c0) : 0.0);
		} else if (strcmp(line, "go\n") == 0) {
			churn();
			keep();
			printf("done\n");
		} else if (strcmp(line, "check\n") == 0) {
			check();
			printf("ok\n");
		} else if (strcmp(line, "free\n") == 0) {
			for (unsigned i = 0; i < KEEP_TOTAL / KEEP_BLOCK; i++) {
				free(kept[i]);
				kept[i] = NULL;
			}
			printf("freed\n");
		} else if (strcmp(line, "fork\n") == 0) {
			forked();
		}
	}
	return 0;
}
