// deep.cpp: a C++ call chain for the unwinder tests, built with -O2
// -fomit-frame-pointer: a virtual call, std::function, a template
// recursion, a function with a try/catch (its CIE carries a personality
// routine and an LSDA: augmentation "zPLR") and a throw that is caught
// before the chain reaches marker(), where the debugger stops.
#include <functional>
#include <stdexcept>
#include <vector>

volatile int sink;

extern "C" __attribute__((noinline)) void marker(int v) {
	sink = v;
	__asm__ volatile("" ::: "memory");
}

template <int N> __attribute__((noinline)) int down(int v) {
	std::vector<int> keep(N + 1, v); // a frame with a destructor to run
	int r = down<N - 1>(v + keep[N]);
	sink = r;
	return r + keep[0];
}

template <> __attribute__((noinline)) int down<0>(int v) {
	marker(v);
	return v;
}

__attribute__((noinline)) int guarded(int v) {
	try {
		if (v > 1000)
			throw std::runtime_error("big");
		if (v >= 0)
			throw v;
	} catch (int x) {
		return down<4>(x);
	} catch (const std::exception &) {
		return -1;
	}
	return 0;
}

struct Runner {
	virtual ~Runner() = default;
	virtual int run(int v) = 0;
};

struct Impl : Runner {
	std::function<int(int)> f;
	__attribute__((noinline)) int run(int v) override { return f(v) + 1; }
};

int main(int argc, char **) {
	Impl impl;
	impl.f = [](int v) { return guarded(v * 2); };
	Runner *r = &impl;
	return r->run(argc) & 1;
}
