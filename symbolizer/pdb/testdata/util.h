static inline unsigned mix(unsigned h, unsigned v) {
	h ^= v;
	h *= 0x9e3779b1u;
	h ^= h >> 15;
	return h;
}

static inline unsigned mix3(unsigned a, unsigned b, unsigned c) {
	unsigned h = mix(a, b);
	h = mix(h, c);
	return h;
}
