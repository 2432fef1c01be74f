/* Allocates known totals in known chains, for the native allocation
 * sampler: main -> churn allocates and frees 1 GiB in 16 KiB blocks;
 * main -> keep allocates 128 MiB in 1 MiB blocks and keeps them until the
 * program exits. Built without frame pointers: the stacks come from the
 * CFI unwinder. With an argument "loop" it churns again and again
 * until it is killed, for recorders that attach to a running process;
 * with "wait" it prints "ready" and waits for a line on its standard
 * input before it churns and keeps once, so that a recorder can attach
 * in between. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHURN_TOTAL (1ull << 30)
#define CHURN_BLOCK (16u << 10)
#define KEEP_TOTAL (128u << 20)
#define KEEP_BLOCK (1u << 20)

static char *kept[KEEP_TOTAL / KEEP_BLOCK];
volatile char sink;

__attribute__((noinline)) void churn(void)
{
	for (unsigned long long done = 0; done < CHURN_TOTAL; done += CHURN_BLOCK) {
		char *p = malloc(CHURN_BLOCK);
		if (!p)
			abort();
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
			abort();
		kept[i][0] = (char)i;
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "wait") == 0) {
		char line[16];
		printf("ready\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 1;
	} else {
		while (argc > 1)
			churn();
	}
	churn();
	keep();
	sink = kept[3][0];
	return 0;
}
