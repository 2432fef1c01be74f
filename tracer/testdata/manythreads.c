// manythreads creates and joins argv[1] short-lived threads, a few at a
// time, each spinning briefly: a recorder must account for every one.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

volatile unsigned long sink;

static void *work(void *arg) {
	unsigned long x = (unsigned long)arg;
	for (int i = 0; i < 2000; i++)
		x = x * 6364136223846793005UL + 1;
	sink += x;
	return NULL;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 20000;
	enum { batch = 8 };
	pthread_t t[batch];
	for (int i = 0; i < n; i += batch) {
		int k = n - i < batch ? n - i : batch;
		for (int j = 0; j < k; j++)
			if (pthread_create(&t[j], NULL, work, (void *)(long)(i + j)) != 0) {
				perror("pthread_create");
				return 1;
			}
		for (int j = 0; j < k; j++)
			pthread_join(t[j], NULL);
	}
	printf("%d threads\n", n);
	return 0;
}
