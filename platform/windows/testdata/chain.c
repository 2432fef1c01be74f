/* A known call chain for the Windows sampler's tests: main -> outer ->
 * middle -> leaf_work, each a real frame (noinline, work after each call
 * so no tail call), built with clang + lld and a PDB. With a DLL path as
 * the second argument it loads that DLL halfway through (a module loaded
 * after the sampler started) and spins in its dll_spin. */
#include <windows.h>
#include <stdlib.h>

static volatile unsigned long long sink;

__attribute__((noinline)) void leaf_work(int n)
{
	for (int i = 0; i < n; i++)
		sink = sink * 6364136223846793005ULL + i;
}

__attribute__((noinline)) void middle(int n)
{
	leaf_work(n);
	sink ^= 1;
}

__attribute__((noinline)) void outer(int n)
{
	middle(n);
	sink ^= 2;
}

typedef void (*spin_fn)(int);

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1;
	ULONGLONG end = GetTickCount64() + (ULONGLONG)(secs * 1000);
	ULONGLONG half = GetTickCount64() + (ULONGLONG)(secs * 500);
	spin_fn spin = 0;
	while (GetTickCount64() < end) {
		if (argc > 2 && !spin && GetTickCount64() >= half) {
			HMODULE h = LoadLibraryA(argv[2]);
			if (!h)
				return 3;
			spin = (spin_fn)GetProcAddress(h, "dll_spin");
			if (!spin)
				return 4;
		}
		if (spin)
			spin(100000);
		else
			outer(100000);
	}
	return 0;
}
