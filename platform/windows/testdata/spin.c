/* A DLL the chain fixture loads after start: dll_spin -> dll_inner. */
static volatile unsigned long long sink;

__attribute__((noinline)) void dll_inner(int n)
{
	for (int i = 0; i < n; i++)
		sink = sink * 2862933555777941757ULL + i;
}

__declspec(dllexport) __attribute__((noinline)) void dll_spin(int n)
{
	dll_inner(n);
	sink ^= 3;
}
