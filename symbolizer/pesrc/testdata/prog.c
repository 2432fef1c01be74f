/* C corpus for the symbolizer oracle tests: inlining-friendly helpers,
   loops, recursion, switch tables and a few libc calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct point { double x, y; };

static inline double sq(double v) { return v * v; }
static inline double dist2(struct point a, struct point b) { return sq(a.x - b.x) + sq(a.y - b.y); }

static int cmp_double(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static unsigned hash_str(const char *s) {
	unsigned h = 2166136261u;
	while (*s) {
		h ^= (unsigned char)*s++;
		h *= 16777619u;
	}
	return h;
}

static inline unsigned mix(unsigned h, unsigned v) { return (h ^ v) * 0x9e3779b1u; }

unsigned fib(unsigned n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

static const char *name_of(int k) {
	switch (k) {
	case 0: return "zero";
	case 1: return "one";
	case 2: return "two";
	case 3: return "three";
	case 4: return "four";
	case 5: return "five";
	default: return "many";
	}
}

double nearest(struct point *pts, int n, struct point q) {
	double best = 1e300;
	for (int i = 0; i < n; i++) {
		double d = dist2(pts[i], q);
		if (d < best)
			best = d;
	}
	return best;
}

void sort_dists(struct point *pts, int n, double *out) {
	struct point o = {0, 0};
	for (int i = 0; i < n; i++)
		out[i] = dist2(pts[i], o);
	qsort(out, n, sizeof *out, cmp_double);
}

unsigned table_hash(int n) {
	unsigned h = 0;
	char buf[64];
	for (int i = 0; i < n; i++) {
		snprintf(buf, sizeof buf, "%s-%d", name_of(i % 8), i);
		h = mix(h, hash_str(buf));
	}
	return h;
}

struct node { int key; struct node *left, *right; };

static struct node *insert(struct node *t, int key) {
	if (!t) {
		t = calloc(1, sizeof *t);
		t->key = key;
		return t;
	}
	if (key < t->key)
		t->left = insert(t->left, key);
	else
		t->right = insert(t->right, key);
	return t;
}

static int depth(const struct node *t) {
	if (!t)
		return 0;
	int l = depth(t->left), r = depth(t->right);
	return 1 + (l > r ? l : r);
}

int tree_depth(int n) {
	struct node *t = NULL;
	unsigned x = 12345;
	for (int i = 0; i < n; i++) {
		x = mix(x, i);
		t = insert(t, (int)(x % 1000));
	}
	return depth(t);
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 100;
	struct point *pts = malloc(n * sizeof *pts);
	double *d = malloc(n * sizeof *d);
	for (int i = 0; i < n; i++) {
		pts[i].x = i * 0.5;
		pts[i].y = (n - i) * 0.25;
	}
	struct point q = {3, 4};
	sort_dists(pts, n, d);
	printf("%f %f %u %u %d\n", nearest(pts, n, q), d[0], table_hash(n), fib(20), tree_depth(n));
	free(pts);
	free(d);
	return 0;
}
