// signal.c: the unwinder must step through signal frames (glibc's
// __restore_rt, CIE augmentation "S") into the interrupted code. First a
// signal raised from a known call chain, then a timer signal that lands
// anywhere in a spinning -O2 -fomit-frame-pointer loop; both handlers call
// marker(), where the test's debugger stops.
#include <signal.h>
#include <string.h>
#include <sys/time.h>

volatile int sink;
volatile int done;
volatile int spinning;

__attribute__((noinline)) void marker(int v) { sink = v; __asm__ volatile("" ::: "memory"); }

__attribute__((noinline)) static void on_usr1(int sig) { marker(sig); sink++; }

__attribute__((noinline)) static void on_alrm(int sig) {
	if (!spinning || done)
		return; // a tick before the loop, or after: wait for the next
	marker(sig);
	done = 1;
}

__attribute__((noinline)) int raiser(int n) {
	raise(SIGUSR1);
	return n + sink;
}

__attribute__((noinline)) int chain(int n) { return raiser(n + 1) * 2; }

__attribute__((noinline)) unsigned spin(unsigned x) {
	spinning = 1;
	while (!done)
		x = x * 2654435761u + (x >> 7);
	return x;
}

__attribute__((noinline)) unsigned spinner(unsigned x) { return spin(x + 3) ^ 5; }

int main(int argc, char **argv) {
	(void)argv;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, 0);
	sa.sa_handler = on_alrm;
	sigaction(SIGALRM, &sa, 0);
	int r = chain(argc);
	struct itimerval it = {{0, 2000}, {0, 2000}};
	setitimer(ITIMER_REAL, &it, 0);
	return (int)(spinner((unsigned)r) & 1);
}
