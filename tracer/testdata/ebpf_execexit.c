// ebpf_execexit forks two children while it runs (times are CPU time
// of each process, so that a loaded machine changes nothing): one spins in
// child_spin for 0.3 s and exits; the other spins in pre_exec for 0.2 s,
// then execs argv[1] with the arguments after it. The parent spins in
// parent_spin for 0.6 s and reaps both. A recorder must follow the
// children, see the first one exit and the second one's new image.
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

volatile unsigned long sink;

#define SPIN(name)                                                 \
	__attribute__((noinline)) void name(double secs) {          \
		double until = now() + secs;                        \
		while (now() < until)                               \
			for (int i = 0; i < 100000; i++)            \
				sink = sink * 6364136223846793005UL + i; \
	}

SPIN(child_spin)
SPIN(pre_exec)
SPIN(parent_spin)

int main(int argc, char **argv) {
	if (argc < 2)
		return 2;
	pid_t a = fork();
	if (a == 0) {
		child_spin(0.3);
		_exit(0);
	}
	pid_t b = fork();
	if (b == 0) {
		pre_exec(0.2);
		execv(argv[1], argv + 1);
		_exit(127);
	}
	parent_spin(0.6);
	int st;
	waitpid(a, &st, 0);
	waitpid(b, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
