// sigcount.c: counts the real-time signals (SIGRTMIN, which queue) it
// receives; on SIGTERM prints the count and exits. Snapshot tests send it
// signals while snapshotting, to check that none is lost.
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile sig_atomic_t count, done;

static void onrt(int sig) { (void)sig; count++; }
static void onterm(int sig) { (void)sig; done = 1; }

int main(void) {
	struct sigaction sa = {0};
	sa.sa_handler = onrt;
	sigaction(SIGRTMIN, &sa, NULL);
	sa.sa_handler = onterm;
	sigaction(SIGTERM, &sa, NULL);
	printf("ready\n");
	fflush(stdout);
	while (!done)
		pause();
	printf("%d\n", (int)count);
	return 0;
}
