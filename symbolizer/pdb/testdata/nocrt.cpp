// The few runtime symbols a CRT-less clang-cl/lld-link build of the
// fixture needs.
extern "C" int _fltused = 0;
extern "C" void _purecall(void) {}
void operator delete(void *) noexcept {}
void operator delete(void *, unsigned long long) noexcept {}
