/* A running service to attach the allocation sampler to: THREADS
 * threads (the first argument, default 2) allocate flat out in
 * main -> spin_thread -> spin (malloc of 16 to 4111 bytes, filled,
 * checked, free: the alloc benchmark's loop), each counting its rounds,
 * and as many control threads run the same loop calling the allocator
 * through pointers taken at the start (dlsym), which no slot redirects,
 * while the main thread answers commands on its standard input, one a
 * line:
 *
 *   rate MS   prints "rate R": the spinning threads' rounds per second of
 *             their own CPU time over the next MS milliseconds, divided
 *             by the control threads' (their throughput against the
 *             allocator's own, whatever else the machine runs: read alone,
 *             either moved by ±30% from one window to the next on a
 *             2-vCPU machine shared with other jobs). The spinning
 *             threads run on CPU 0 and the control threads on CPU 1 for
 *             half the time, then the other way round, and R is the
 *             geometric mean of the two halves' ratios: the two CPUs of
 *             that machine ran the same loop up to 15% apart, which
 *             this cancels.
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
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
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
	int control;
	char pad[44];
} __attribute__((aligned(64)));
static struct counter counters[2 * MAX_THREADS];
static int nthreads = 2;
static void *(*direct_malloc)(size_t);
static void (*direct_free)(void *);

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
		unsigned char *p = c->control ? direct_malloc(n) : malloc(n);
		if (!p)
			bad("malloc failed");
		unsigned char v = (unsigned char)(*seed >> 20);
		memset(p, v, n);
		p[n - 1] = v ^ 0x5a;
		sink = (char)p[n / 2];
		if (p[0] != v || p[n - 1] != (unsigned char)(v ^ 0x5a))
			bad("a block changed under the program");
		if (c->control)
			direct_free(p);
		else
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

static double thread_cpu(int control)
{
	double s = 0;
	for (int i = control * nthreads; i < (control + 1) * nthreads; i++) {
		clockid_t id;
		struct timespec ts;
		if (pthread_getcpuclockid(counters[i].th, &id) == 0 && clock_gettime(id, &ts) == 0)
			s += (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	}
	return s;
}

static uint64_t rounds(int control)
{
	uint64_t n = 0;
	for (int i = control * nthreads; i < (control + 1) * nthreads; i++)
		n += counters[i].rounds;
	return n;
}

/* root returns the square root of x >= 0 (Newton's method; no libm). */
static double root(double x)
{
	double r = x > 1 ? x : 1;
	for (int i = 0; i < 60; i++)
		r = (r + x / r) / 2;
	return r;
}

/* pin puts the spinning threads on CPU a and the control threads on
 * CPU b. */
static void pin(int a, int b)
{
	for (int i = 0; i < 2 * nthreads; i++) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(counters[i].control ? b : a, &set);
		pthread_setaffinity_np(counters[i].th, sizeof(set), &set);
	}
}

/* half returns the spinning threads' rate over the control threads'
 * over ms, with the spinning threads on CPU a and the control threads on
 * CPU b. */
static double half(long ms, int a, int b)
{
	pin(a, b);
	uint64_t n0 = rounds(0), m0 = rounds(1);
	double c0 = thread_cpu(0), d0 = thread_cpu(1);
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
	uint64_t n1 = rounds(0), m1 = rounds(1);
	double c1 = thread_cpu(0), d1 = thread_cpu(1);
	double r = c1 > c0 ? (double)(n1 - n0) / (c1 - c0) : 0.0, rc = d1 > d0 ? (double)(m1 - m0) / (d1 - d0) : 0.0;
	return rc > 0 ? r / rc : 0.0;
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
	direct_malloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "malloc");
	direct_free = (void (*)(void *))dlsym(RTLD_DEFAULT, "free");
	if (!direct_malloc || !direct_free)
		bad("no malloc or free");
	for (int i = 0; i < 2 * nthreads; i++) {
		counters[i].control = i >= nthreads;
		if (pthread_create(&counters[i].th, NULL, spin_thread, &counters[i]) != 0)
			bad("pthread_create failed");
	}
	printf("ready\n");
	char line[64];
	while (fgets(line, sizeof(line), stdin)) {
		if (strncmp(line, "rate ", 5) == 0) {
			long ms = atol(line + 5);
			double r;
			if (sysconf(_SC_NPROCESSORS_ONLN) >= 2)
				r = root(half(ms / 2, 0, 1) * half(ms / 2, 1, 0));
			else
				r = half(ms, 0, 0);
			printf("rate %.4f\n", r);
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
