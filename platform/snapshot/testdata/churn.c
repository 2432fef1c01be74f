// churn.c: threads are created and exit all the time, for checking that
// snapshots taken meanwhile never leave a thread stopped or traced.
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static void *shortlived(void *arg) {
	struct timespec ts = {0, (long)arg * 100000L};
	nanosleep(&ts, NULL);
	return NULL;
}

int main(void) {
	int ready = 0;
	for (long i = 0;; i++) {
		pthread_t th[8];
		for (int k = 0; k < 8; k++)
			pthread_create(&th[k], NULL, shortlived, (void *)((i + k) % 7));
		if (!ready) {
			printf("ready\n");
			fflush(stdout);
			ready = 1;
		}
		for (int k = 0; k < 8; k++)
			pthread_join(th[k], NULL);
	}
}
