// C++ corpus for the symbolizer oracle tests: heavy STL inlining.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>
#include <cstdio>

namespace corpus {

struct Shape {
  virtual ~Shape() = default;
  virtual double area() const = 0;
  virtual std::string name() const = 0;
};

struct Rect : Shape {
  double w, h;
  Rect(double w, double h) : w(w), h(h) {}
  double area() const override { return w * h; }
  std::string name() const override { return "rect"; }
};

struct Circle : Shape {
  double r;
  explicit Circle(double r) : r(r) {}
  double area() const override { return 3.14159 * r * r; }
  std::string name() const override { return "circle"; }
};

template <typename T>
class Stats {
 public:
  void add(T v) { vals_.push_back(v); }
  T sum() const { return std::accumulate(vals_.begin(), vals_.end(), T{}); }
  T median() {
    std::sort(vals_.begin(), vals_.end());
    return vals_.empty() ? T{} : vals_[vals_.size() / 2];
  }
 private:
  std::vector<T> vals_;
};

std::map<std::string, int> count_words(const std::string& text) {
  std::map<std::string, int> counts;
  std::istringstream in(text);
  std::string w;
  while (in >> w) ++counts[w];
  return counts;
}

std::unordered_map<int, std::vector<int>> buckets(const std::vector<int>& v) {
  std::unordered_map<int, std::vector<int>> out;
  for (int x : v) out[x % 17].push_back(x);
  return out;
}

double total_area(const std::vector<std::unique_ptr<Shape>>& shapes) {
  double t = 0;
  for (const auto& s : shapes) t += s->area();
  return t;
}

std::vector<std::string> names(const std::vector<std::unique_ptr<Shape>>& shapes) {
  std::vector<std::string> out;
  std::transform(shapes.begin(), shapes.end(), std::back_inserter(out),
                 [](const std::unique_ptr<Shape>& s) { return s->name(); });
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int apply_all(const std::vector<std::function<int(int)>>& fs, int x) {
  for (const auto& f : fs) x = f(x);
  return x;
}

}  // namespace corpus

int main(int argc, char** argv) {
  using namespace corpus;
  int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  std::reverse(v.begin(), v.end());
  Stats<int> st;
  Stats<double> sd;
  for (int x : v) {
    st.add(x);
    sd.add(x * 0.5);
  }
  std::vector<std::unique_ptr<Shape>> shapes;
  for (int i = 0; i < 10; i++) {
    if (i % 2) shapes.push_back(std::make_unique<Rect>(i, i + 1));
    else shapes.push_back(std::make_unique<Circle>(i));
  }
  auto words = count_words("a b c a b a the quick brown fox jumps over the lazy dog");
  auto b = buckets(v);
  std::vector<std::function<int(int)>> fs = {[](int x) { return x + 1; }, [n](int x) { return x * n; },
                                             [&](int x) { return x - static_cast<int>(words.size()); }};
  auto nm = names(shapes);
  std::printf("%d %d %f %f %zu %zu %zu %d\n", st.sum(), st.median(), sd.median(), total_area(shapes),
              words.size(), b.size(), nm.size(), apply_all(fs, 3));
  std::shared_ptr<Shape> sp = std::make_shared<Rect>(2, 3);
  std::weak_ptr<Shape> wp = sp;
  if (auto l = wp.lock()) std::printf("%s\n", l->name().c_str());
  return 0;
}
