// twothreads spins two threads for argv[1] seconds of wall time, each in
// main → work → step, a CPU-bound program whose stacks repeat: with
// randstack (stacks that never repeat) and short-lived processes, the
// agent scenario's load.
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;
static double secs;

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) static void step(void) {
	for (int i = 0; i < 100000; i++)
		sink += i * i;
}

__attribute__((noinline)) static void *work(void *arg) {
	double end = now() + secs;
	while (now() < end)
		step();
	return arg;
}

int main(int argc, char **argv) {
	secs = argc > 1 ? atof(argv[1]) : 1;
	pthread_t t;
	pthread_create(&t, 0, work, 0);
	work(0);
	pthread_join(t, 0);
	return 0;
}
