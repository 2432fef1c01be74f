// seize.c: seizes one thread with ptrace (without stopping it) and holds
// it until killed, so a snapshot test meets a thread with another tracer.
//
//	seize TID
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc != 2)
		return 2;
	pid_t tid = (pid_t)atoi(argv[1]);
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) != 0) {
		perror("PTRACE_SEIZE");
		return 1;
	}
	printf("attached\n");
	fflush(stdout);
	for (;;)
		pause();
}
