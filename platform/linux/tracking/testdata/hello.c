// hello is a minimal program for build-id tests.
int main(void) { return 0; }
