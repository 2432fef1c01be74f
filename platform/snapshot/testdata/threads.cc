// threads.cc: the C++ twin of threads.c. Worker std::threads recurse
// through virtual methods of three classes in a namespace, a template and a
// lambda, then block in read() on a pipe nobody writes; when all are
// blocked main prints "ready" and joins them.
//
//	threads_cc [NTHREADS [DEPTH]]
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

namespace rawstack_fixture {

static int pipefd[2];
static std::mutex mu;
static std::condition_variable cv;
static int arrived;

struct Step {
	virtual ~Step() {}
	virtual int step(int n, int salt) = 0;
};

__attribute__((noinline)) int leaf_block(int salt) {
	volatile char pad[64];
	pad[0] = (char)salt;
	{
		std::lock_guard<std::mutex> g(mu);
		arrived++;
	}
	cv.notify_one();
	char c;
	for (;;) {
		if (read(pipefd[0], &c, 1) <= 0)
			pause();
	}
	return pad[0];
}

Step *next_step(int n);

template <int K> struct Stepper : Step {
	__attribute__((noinline)) int step(int n, int salt) override {
		volatile long frame[K * 4 + 1];
		frame[0] = n;
		int r = n <= 0 ? leaf_block(salt) : next_step(n)->step(n - 1, salt + K);
		__asm__ volatile("" ::: "memory");
		return r + (int)frame[0];
	}
};

static Stepper<1> s1;
static Stepper<2> s2;
static Stepper<5> s5;

__attribute__((noinline)) Step *next_step(int n) {
	switch (n % 3) {
	case 0: return &s1;
	case 1: return &s2;
	default: return &s5;
	}
}

} // namespace rawstack_fixture

using namespace rawstack_fixture;

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 4;
	int depth = argc > 2 ? atoi(argv[2]) : 12;
	if (pipe(pipefd) != 0)
		return 1;
	std::vector<std::thread> th;
	for (int i = 0; i < n; i++) {
		auto body = [i, depth]() __attribute__((noinline)) {
			volatile int r = next_step(i)->step(depth + i % 3, i);
			(void)r;
		};
		th.emplace_back(body);
	}
	{
		std::unique_lock<std::mutex> g(mu);
		cv.wait(g, [n] { return arrived >= n; });
	}
	printf("ready\n");
	fflush(stdout);
	for (auto &t : th)
		t.join();
	return 0;
}
