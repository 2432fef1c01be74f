/* The floor under any ptrace snapshot of a process's threads, for the
 * snapshot scenario: a C program that seizes and interrupts every thread,
 * waits for each to stop and reads its registers, and nothing else (no
 * maps, no stack, no unwind, no names, no output).  With "detach" it
 * detaches each thread (PTRACE_DETACH, as rawstack and eu-stack do); with
 * "exit" it exits and the kernel detaches them as the tracer dies.
 * ptfloor PID detach|exit */
#define _GNU_SOURCE
#include <dirent.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>

#define MAXTHREADS 4096

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	char path[64];
	snprintf(path, sizeof path, "/proc/%s/task", argv[1]);
	DIR *d = opendir(path);
	if (!d) {
		perror(path);
		return 1;
	}
	static int tids[MAXTHREADS];
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) && n < MAXTHREADS)
		if (e->d_name[0] != '.')
			tids[n++] = atoi(e->d_name);
	closedir(d);
	for (int i = 0; i < n; i++)
		if (ptrace(PTRACE_SEIZE, tids[i], 0, 0) || ptrace(PTRACE_INTERRUPT, tids[i], 0, 0)) {
			perror("ptrace seize");
			return 1;
		}
	unsigned long long sum = 0;
	for (int i = 0; i < n; i++) {
		int st;
		if (waitpid(tids[i], &st, __WALL) < 0) {
			perror("waitpid");
			return 1;
		}
		struct user_regs_struct r;
		struct iovec iov = {&r, sizeof r};
		if (ptrace(PTRACE_GETREGSET, tids[i], NT_PRSTATUS, &iov)) {
			perror("ptrace getregset");
			return 1;
		}
		sum += iov.iov_len;
	}
	if (strcmp(argv[2], "detach") == 0)
		for (int i = 0; i < n; i++)
			ptrace(PTRACE_DETACH, tids[i], 0, 0);
	return sum == 0;
}
