// A corpus of C++ declarations whose MSVC decorated names the demangler
// test checks against llvm-undname. Compiled with clang for
// x86_64-pc-windows-msvc; the test reads every symbol of the object file.
#include <stddef.h>

namespace outer {
namespace inner {

struct Point {
	int x, y;
	Point() : x(0), y(0) {}
	Point(int a, int b) : x(a), y(b) {}
	~Point() {}
	Point &operator=(const Point &o) { x = o.x; y = o.y; return *this; }
	Point operator+(const Point &o) const { return Point(x + o.x, y + o.y); }
	bool operator==(const Point &o) const { return x == o.x && y == o.y; }
	bool operator<(const Point &o) const { return x < o.x; }
	int &operator[](int i) { return i ? y : x; }
	int operator()(int a, int b) const { return a * x + b * y; }
	operator long() const { return x; }
	Point &operator+=(const Point &o) { x += o.x; return *this; }
	Point &operator<<=(int s) { x <<= s; return *this; }
	static int count;
	static Point origin();
	int get() const volatile { return x; }
	void set(int v) & { x = v; }
	void set(int v) && { y = v; }
	void *operator new(size_t n);
	void operator delete(void *p);
};

int Point::count = 1;
Point Point::origin() { return Point(); }
void *Point::operator new(size_t n) { static char buf[64]; (void)n; return buf; }
void Point::operator delete(void *) {}

class Base {
public:
	virtual ~Base() {}
	virtual int area() const { return 0; }
protected:
	virtual void hook(int) {}
private:
	static void secret(double) {}
	friend int poke(Base &);
};

class Derived : public Base {
public:
	int area() const override { return 7; }
};

int poke(Base &b) { Base::secret(1.0); return b.area(); }

enum Color { Red, Green };
enum class Shade : unsigned char { Light, Dark };
union Bits { int i; float f; };

template <typename T, int N>
struct Array {
	T data[N];
	T &at(int i) { return data[i]; }
	template <typename U>
	U convert(U u) const { return u + (U)data[0]; }
};

template <typename... Ts>
int count_args(Ts...) { return sizeof...(Ts); }

template <typename T>
T maxof(T a, T b) { return a < b ? b : a; }

} // namespace inner

namespace {
int hidden_counter(int x) { return x + 1; }
}

int use_hidden(int x) { return hidden_counter(x); }

} // namespace outer

using namespace outer::inner;

int takes_many(char c, signed char sc, unsigned char uc, short s, unsigned short us, int i, unsigned u, long l,
	       unsigned long ul, long long ll, unsigned long long ull, float f, double d, long double ld, bool b,
	       wchar_t w, char16_t c16, char32_t c32) {
	return c + sc + uc + s + us + i + (int)u + (int)l + (int)ul + (int)ll + (int)ull + (int)f + (int)d + (int)ld + b + w + c16 + (int)c32;
}
int takes_ptrs(const char *s, int *const p, volatile int *v, const volatile int *cv, int **pp, int &r, const int &cr,
	       int &&rr, int (*arr)[4], int (&aref)[2][3]) {
	return s[0] + *p + *v + *cv + **pp + r + cr + rr + (*arr)[0] + aref[1][2];
}
int takes_funcs(int (*f)(int), void (*g)(void), int (Point::*mf)(int, int) const, int Point::*mp, Point (*h)(Point, Point)) {
	Point p;
	return f(1) + (p.*mf)(1, 2) + p.*mp + h(p, p).x + (g ? 1 : 0);
}
int takes_tags(Color c, Shade s, Bits b, Point p, Point *pp, const Point &cp, Derived *d) {
	return (int)c + (int)s + b.i + p.x + pp->y + cp.x + d->area();
}
int variadic(const char *fmt, ...) { return fmt[0]; }
int repeated(Point *a, Point *b, const Point &c, const Point &d, int (*f)(int), int (*g)(int)) {
	return a->x + b->x + c.x + d.x + f(1) + g(2);
}
decltype(nullptr) nothing(decltype(nullptr) n) { return n; }
const int returns_const() { return 3; }
const Point *returns_ptr() { static Point p; return &p; }
int (*returns_fp())(int) { return nullptr; }
int global_var = 5;
const double global_const = 1.5;
volatile long global_volatile;
int *global_ptr;
const char *const global_str = "x";
int global_array[3];
Point global_point;
int Point::*global_mp = &Point::x;
extern "C" int c_function(int x) { return x; }
int __stdcall std_call(int x) { return x; }
int __fastcall fast_call(int x) { return x; }
int __vectorcall vector_call(int x) { return x; }

static int local_statics() {
	static int counter = 0;
	return ++counter;
}

int instantiate() {
	Array<int, 4> a = {};
	Array<Point, 2> pa;
	Array<const char *, 1> sa = {};
	int r = a.at(0) + pa.at(1).x + (sa.at(0) ? 1 : 0);
	r += a.convert<double>(1.5) + a.convert<long long>(2);
	r += count_args() + count_args(1, 2.0, 'c') + count_args(Point(), &r);
	r += maxof(1, 2) + (int)maxof(1.0, 2.0) + maxof<Point>(Point(), Point()).x;
	Point p(1, 2), q;
	q = p + p;
	q += p;
	q <<= 1;
	r += q == p;
	r += q < p;
	r += q[1] + q(1, 2) + (long)q + q.get() + Point::count;
	q.set(1);
	Point().set(2);
	Point *np = new Point(3, 4);
	delete np;
	Derived d;
	r += poke(d) + local_statics();
	return r;
}
