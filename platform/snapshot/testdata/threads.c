// threads.c: a process whose threads each hold a known deep call chain
// while blocked, for comparing snapshot stacks against gdb and eu-stack.
//
//	threads [NTHREADS [DEPTH]]
//
// Each worker recurses through chain_a/chain_b/chain_c (functions with
// different frame sizes, so -fomit-frame-pointer code needs CFI) to DEPTH
// levels, then blocks in read() on a pipe nobody writes. When every worker
// is blocked the main thread prints "ready" and blocks in pthread_join.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int pipefd[2];
static int depth = 12;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int arrived;

int chain_a(int n, int salt);
int chain_b(int n, int salt);
int chain_c(int n, int salt);

__attribute__((noinline)) int leaf_block(int salt) {
	volatile char pad[48];
	pad[0] = (char)salt;
	pthread_mutex_lock(&mu);
	arrived++;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	char c;
	for (;;) {
		if (read(pipefd[0], &c, 1) <= 0)
			pause();
	}
	return pad[0];
}

__attribute__((noinline)) int chain_a(int n, int salt) {
	volatile int x[3] = {n, salt, 1};
	int r = n <= 0 ? leaf_block(salt) : chain_b(n - 1, salt + x[1]);
	__asm__ volatile("" ::: "memory");
	return r + x[0];
}

__attribute__((noinline)) int chain_b(int n, int salt) {
	volatile long y[9];
	y[0] = n;
	y[8] = salt;
	int r = n <= 0 ? leaf_block(salt) : chain_c(n - 1, salt ^ (int)y[8]);
	__asm__ volatile("" ::: "memory");
	return r + (int)y[0];
}

__attribute__((noinline)) int chain_c(int n, int salt) {
	volatile char z[200];
	z[0] = (char)n;
	z[199] = (char)salt;
	int r = n <= 0 ? leaf_block(salt) : chain_a(n - 1, salt + z[199]);
	__asm__ volatile("" ::: "memory");
	return r + z[0];
}

static void *worker(void *arg) {
	long i = (long)arg;
	// Each thread starts the chain at a different function and depth.
	int d = depth + (int)(i % 3);
	int r;
	switch (i % 3) {
	case 0: r = chain_a(d, (int)i); break;
	case 1: r = chain_b(d, (int)i); break;
	default: r = chain_c(d, (int)i); break;
	}
	return (void *)(long)r;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 4;
	if (argc > 2)
		depth = atoi(argv[2]);
	if (pipe(pipefd) != 0)
		return 1;
	pthread_t *th = calloc(n, sizeof *th);
	for (long i = 0; i < n; i++) {
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setstacksize(&a, 256 << 10);
		if (pthread_create(&th[i], &a, worker, (void *)i) != 0)
			return 1;
	}
	pthread_mutex_lock(&mu);
	while (arrived < n)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	printf("ready\n");
	fflush(stdout);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	return 0;
}
