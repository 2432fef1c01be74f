// C++ fixture: namespaces, classes, templates, virtual calls, and small
// functions that -O2 inlines into their callers across files.
#include "shapes.h"

namespace geo {

template <typename T>
static inline T clampv(T v, T lo, T hi) {
	if (v < lo)
		return lo;
	if (v > hi)
		return hi;
	return v;
}

double Circle::area() const {
	double r = clampv(radius_, 0.0, 1e6);
	return 3.14159 * r * r;
}

double Rect::area() const {
	double w = clampv(w_, 0.0, 1e6);
	double h = clampv(h_, 0.0, 1e6);
	return w * h;
}

double Shapes::total() const {
	double t = 0;
	for (int i = 0; i < n_; i++)
		t += items_[i]->area() * weight(i);
	return t;
}

} // namespace geo

volatile double sinkd;

extern "C" int run_shapes(int n) {
	geo::Circle c(n);
	geo::Rect r(n, n + 1);
	geo::Shape *items[2] = {&c, &r};
	geo::Shapes s(items, 2);
	for (int i = 0; i < n; i++) {
		sinkd = s.total();
		sinkd = geo::accumulate<int>(i, n) + geo::accumulate<double>(i, 0.5);
	}
	return (int)sinkd;
}
