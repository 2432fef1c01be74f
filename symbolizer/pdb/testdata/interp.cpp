// A small bytecode interpreter: templates, member functions and helpers
// that -O2 inlines several levels deep, for the inline-chain agreement.
namespace vm {

template <typename T, int N>
struct Stack {
	T items[N];
	int top = 0;
	inline void push(T v) {
		if (top < N)
			items[top++] = v;
	}
	inline T pop() {
		if (top > 0)
			return items[--top];
		return T();
	}
	inline T peek() const { return top > 0 ? items[top - 1] : T(); }
};

struct Op {
	unsigned char code;
	int arg;
};

static inline int clamp(int v, int lo, int hi) {
	if (v < lo)
		return lo;
	if (v > hi)
		return hi;
	return v;
}

static inline int apply(int code, int a, int b) {
	switch (code) {
	case 0:
		return a + b;
	case 1:
		return a - b;
	case 2:
		return a * b;
	case 3:
		return b ? a / b : 0;
	default:
		return clamp(a ^ b, -1000, 1000);
	}
}

class Machine {
public:
	inline void binary(int code) {
		int b = stack.pop();
		int a = stack.pop();
		stack.push(apply(code, a, b));
	}
	inline void step(const Op &op) {
		if (op.code < 5)
			binary(op.code);
		else if (op.code == 5)
			stack.push(op.arg);
		else if (op.code == 6)
			stack.push(stack.peek());
		else
			stack.push(clamp(stack.pop() + op.arg, 0, 255));
	}
	__attribute__((noinline)) int run(const Op *ops, int n) {
		for (int i = 0; i < n; i++)
			step(ops[i]);
		return stack.peek();
	}

private:
	Stack<int, 64> stack;
};

template <typename F>
__attribute__((noinline)) int repeat(int n, F f) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += f(i);
	return s;
}

} // namespace vm

extern "C" int run_interp(int n) {
	vm::Op prog[] = {{5, 3}, {5, 4}, {2, 0}, {6, 0}, {0, 0}, {7, 9}, {5, 2}, {3, 0}, {5, 7}, {4, 0}};
	return vm::repeat(n, [&](int i) {
		vm::Machine m;
		prog[0].arg = i;
		return m.run(prog, 10);
	});
}
