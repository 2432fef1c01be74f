// Command cgo is the Go-with-cgo fixture of the snapshot tests: goroutines
// locked to their threads call into C, which recurses through chain_a,
// chain_b and chain_c (built -O2 -fomit-frame-pointer) and blocks in read()
// on a pipe nobody writes. When every C chain is blocked main prints
// "ready".
//
//	cgo [NTHREADS [DEPTH]]
package main

/*
#cgo CFLAGS: -O2 -fomit-frame-pointer
#include <unistd.h>

static int pipefd[2];
static int arrived;

static void setup(void) { if (pipe(pipefd) != 0) _exit(1); }
static int arrived_count(void) { return __atomic_load_n(&arrived, __ATOMIC_SEQ_CST); }

int chain_a(int n, int salt);
int chain_b(int n, int salt);
int chain_c(int n, int salt);

__attribute__((noinline)) int leaf_block(int salt) {
	volatile char pad[48];
	pad[0] = (char)salt;
	__atomic_add_fetch(&arrived, 1, __ATOMIC_SEQ_CST);
	char c;
	for (;;) {
		if (read(pipefd[0], &c, 1) <= 0)
			pause();
	}
	return pad[0];
}

__attribute__((noinline)) int chain_a(int n, int salt) {
	volatile int x[3] = {n, salt, 1};
	int r = n <= 0 ? leaf_block(salt) : chain_b(n - 1, salt + x[1]);
	__asm__ volatile("" ::: "memory");
	return r + x[0];
}

__attribute__((noinline)) int chain_b(int n, int salt) {
	volatile long y[9];
	y[0] = n;
	y[8] = salt;
	int r = n <= 0 ? leaf_block(salt) : chain_c(n - 1, salt ^ (int)y[8]);
	__asm__ volatile("" ::: "memory");
	return r + (int)y[0];
}

__attribute__((noinline)) int chain_c(int n, int salt) {
	volatile char z[200];
	z[0] = (char)n;
	z[199] = (char)salt;
	int r = n <= 0 ? leaf_block(salt) : chain_a(n - 1, salt + z[199]);
	__asm__ volatile("" ::: "memory");
	return r + z[0];
}

__attribute__((noinline)) static int c_worker(int i, int depth) {
	int r = chain_a(depth + i % 3, i);
	__asm__ volatile("" ::: "memory");
	return r;
}
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

func main() {
	n, depth := 4, 12
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	if len(os.Args) > 2 {
		depth, _ = strconv.Atoi(os.Args[2])
	}
	C.setup()
	for i := 0; i < n; i++ {
		go func() {
			runtime.LockOSThread()
			C.c_worker(C.int(i), C.int(depth))
		}()
	}
	for int(C.arrived_count()) < n {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("ready")
	for {
		time.Sleep(time.Hour)
	}
}
