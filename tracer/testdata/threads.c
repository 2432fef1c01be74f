// threads starts argv[2] named threads after spinning 0.1 s; every thread
// then spins for argv[1] seconds of its own CPU time. worker-0 also starts
// one thread that never names itself: it inherits "worker-0".
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double secs;
volatile unsigned long sink;

// spin burns d seconds of the calling thread's CPU time.
static void spin(double d) {
	double until = now() + d;
	unsigned long x = 1;
	while (now() < until)
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005UL + i;
	sink = x;
}

static void *unnamed(void *arg) {
	(void)arg;
	spin(secs / 2);
	return NULL;
}

static void *worker(void *arg) {
	char name[16];
	snprintf(name, sizeof name, "worker-%ld", (long)arg);
	pthread_setname_np(pthread_self(), name);
	pthread_t child;
	int started = arg == 0 && pthread_create(&child, NULL, unnamed, NULL) == 0;
	spin(secs);
	if (started)
		pthread_join(child, NULL);
	return NULL;
}

int main(int argc, char **argv) {
	secs = argc > 1 ? atof(argv[1]) : 1.0;
	int n = argc > 2 ? atoi(argv[2]) : 3;
	spin(0.1);
	pthread_t th[64];
	if (n > 64)
		n = 64;
	for (long i = 0; i < n; i++)
		pthread_create(&th[i], NULL, worker, (void *)i);
	spin(secs);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	return 0;
}
