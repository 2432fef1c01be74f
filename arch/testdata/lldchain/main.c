// main.c is lldchain, linked against liblldchain.so: main -> lib_a ->
// lib_b -> lib_c spins argv[1] seconds of CPU time (a negative number:
// forever). Built with -O2 -fomit-frame-pointer, only CFI recovers the
// chain. Before it spins it prints, for each loaded object, the dynamic
// loader's load bias ("bias PATH HEX", from dl_iterate_phdr: the ground
// truth a bias computed from /proc/PID/maps must match), then "ready".
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <stdlib.h>

unsigned long lib_a(double secs);

volatile unsigned long main_sink;

static int print_bias(struct dl_phdr_info *info, size_t size, void *data) {
	(void)size;
	(void)data;
	printf("bias %s %lx\n", info->dlpi_name[0] ? info->dlpi_name : "-", (unsigned long)info->dlpi_addr);
	return 0;
}

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
	setvbuf(stdout, NULL, _IONBF, 0);
	dl_iterate_phdr(print_bias, NULL);
	printf("ready\n");
	if (secs < 0)
		for (;;)
			main_sink += lib_a(3600);
	main_sink += lib_a(secs);
	return 0;
}
