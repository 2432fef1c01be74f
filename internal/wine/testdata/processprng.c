/* bcryptprimitives.dll for Wine 8, which lacks ProcessPrng: Go 1.21 and
 * later fill their random state through it at start-up. The shim
 * implements it with advapi32's SystemFunction036 (RtlGenRandom), which
 * Wine has. Built and installed into the test prefix by internal/wine. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG len);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
	while (len > 0) {
		ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
		if (!SystemFunction036(data, n))
			return FALSE;
		data += n;
		len -= n;
	}
	return TRUE;
}
