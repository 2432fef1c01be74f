// Rust corpus for the symbolizer oracle tests: generics, iterators,
// closures and collections, so that optimized code inlines heavily.
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone)]
struct Point {
    x: f64,
    y: f64,
}

trait Shape {
    fn area(&self) -> f64;
}

struct Circle(f64);
struct Rect(f64, f64);

impl Shape for Circle {
    fn area(&self) -> f64 {
        std::f64::consts::PI * self.0 * self.0
    }
}

impl Shape for Rect {
    fn area(&self) -> f64 {
        self.0 * self.1
    }
}

fn dist(a: &Point, b: &Point) -> f64 {
    ((a.x - b.x).powi(2) + (a.y - b.y).powi(2)).sqrt()
}

fn nearest(points: &[Point], q: &Point) -> Option<usize> {
    points
        .iter()
        .enumerate()
        .min_by(|a, b| dist(a.1, q).partial_cmp(&dist(b.1, q)).unwrap())
        .map(|(i, _)| i)
}

fn word_counts(text: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for w in text.split_whitespace() {
        *m.entry(w.to_lowercase()).or_insert(0) += 1;
    }
    m
}

fn buckets(v: &[u64]) -> HashMap<u64, Vec<u64>> {
    let mut h: HashMap<u64, Vec<u64>> = HashMap::new();
    for &x in v {
        h.entry(x % 17).or_default().push(x);
    }
    h
}

fn total_area(shapes: &[Box<dyn Shape>]) -> f64 {
    shapes.iter().map(|s| s.area()).sum()
}

fn main() {
    let n: usize = std::env::args().count() * 1000;
    let points: Vec<Point> = (0..n).map(|i| Point { x: i as f64, y: (n - i) as f64 }).collect();
    let q = Point { x: 3.0, y: 4.0 };
    let mut v: Vec<u64> = (0..n as u64).rev().collect();
    v.sort_unstable();
    let shapes: Vec<Box<dyn Shape>> = (0..10)
        .map(|i| -> Box<dyn Shape> { if i % 2 == 0 { Box::new(Circle(i as f64)) } else { Box::new(Rect(i as f64, 2.0)) } })
        .collect();
    let wc = word_counts("the quick brown fox jumps over the lazy dog The End");
    let b = buckets(&v);
    println!("{:?} {} {} {} {:?}", nearest(&points, &q), total_area(&shapes), wc.len(), b.len(), points[0]);
}
