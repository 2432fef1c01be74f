// ebpf_sys spends argv[1] seconds of CPU time in main -> churn, which
// makes small system calls (getppid, and 1-byte writes to /dev/null) in a
// loop, so most of its samples are taken in the kernel. Built with
// -fomit-frame-pointer: the user part of each stack needs CFI.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

volatile long sink;

__attribute__((noinline)) void churn(int fd, double until) {
	char c = 'x';
	while (now() < until) {
		for (int i = 0; i < 1000; i++) {
			sink += syscall(SYS_getppid);
			sink += write(fd, &c, 1);
		}
	}
}

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
	int fd = open("/dev/null", O_WRONLY);
	churn(fd, now() + secs);
	return 0;
}
