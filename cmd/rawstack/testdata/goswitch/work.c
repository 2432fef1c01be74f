// The C half of goswitch, built -O2 -fomit-frame-pointer (main.go's
// CFLAGS): no frame pointers, so only CFI finds its callers.
#include "_cgo_export.h"

__attribute__((noinline)) static unsigned long c_leaf(unsigned long x) {
	for (int i = 0; i < 1000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

__attribute__((noinline)) static unsigned long c_mid(unsigned long x) {
	volatile unsigned long pad[5];
	pad[0] = x;
	for (int i = 0; i < 100; i++)
		x = c_leaf(x + pad[0]);
	return x;
}

unsigned long c_work(unsigned long x) { return c_mid(x) + 1; }

__attribute__((noinline)) static void c_inner(int n) {
	volatile int pad[4];
	pad[0] = n;
	goCallback(n + pad[0]);
	__asm__ volatile("" ::: "memory");
}

void c_outer(int n) {
	volatile int pad[6];
	pad[1] = n;
	c_inner(n + pad[1]);
	__asm__ volatile("" ::: "memory");
}
