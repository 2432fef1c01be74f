// forkdl spins briefly, then dlopens argv[1] and calls its late_spin, then
// forks a child that calls late_spin too, and waits for it.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 2)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	void (*spin)(double) = (void (*)(double))dlsym(h, "late_spin");
	if (!spin)
		return 1;
	spin(0.2);
	pid_t pid = fork();
	if (pid == 0) {
		spin(0.3);
		_exit(0);
	}
	spin(0.1);
	int st;
	waitpid(pid, &st, 0);
	return 0;
}
