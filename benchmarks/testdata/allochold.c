/* Keeps N blocks of 64 bytes allocated until it exits (N from argv), for
 * the alloc scenario's recorder memory: recorded with --alloc-rate 1,
 * every block is a live sampled allocation. */
#include <stdlib.h>

__attribute__((noinline)) static void **hold(long n)
{
	void **kept = malloc(n * sizeof *kept);
	for (long i = 0; i < n; i++) {
		kept[i] = malloc(64);
		((char *)kept[i])[0] = 1;
	}
	return kept;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	void **kept = hold(n);
	return ((char *)kept[n / 2])[0] - 1;
}
