namespace geo {

struct Shape {
	virtual ~Shape() {}
	virtual double area() const = 0;
};

struct Circle : Shape {
	explicit Circle(double r) : radius_(r) {}
	double area() const override;
	double radius_;
};

struct Rect : Shape {
	Rect(double w, double h) : w_(w), h_(h) {}
	double area() const override;
	double w_, h_;
};

class Shapes {
public:
	Shapes(Shape **items, int n) : items_(items), n_(n) {}
	double total() const;

private:
	double weight(int i) const {
		if (i & 1)
			return 0.5;
		return 1.0 + i;
	}
	Shape **items_;
	int n_;
};

template <typename T>
T accumulate(T a, T b) {
	T s = a;
	for (int i = 0; i < 4; i++)
		s = s * b + a;
	return s;
}

} // namespace geo
