static inline int sq(int x) { return x * x; }
int f(int x) { return sq(x) + 1; }
void _start(void) { f(3); for (;;) ; }
