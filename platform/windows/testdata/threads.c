/* Threads parked in a known call chain, for snapshots and off-CPU
 * samples: worker -> outer -> middle -> leaf_wait, blocked in
 * WaitForSingleObject. Each worker names itself "parked-I" with
 * SetThreadDescription where the OS has it.
 *
 *   threads.exe N SECONDS PIDFILE        park N threads, write the pid to
 *                                        PIDFILE, live SECONDS seconds
 *   threads.exe N 0 - DUMPFILE           park N threads and write a
 *                                        minidump of this process with
 *                                        dbghelp's MiniDumpWriteDump
 */
#include <windows.h>
#include <dbghelp.h>
#include <stdio.h>
#include <stdlib.h>

static HANDLE never;
static volatile LONG parked;
static volatile int sink;

__attribute__((noinline)) void leaf_wait(int i)
{
	InterlockedIncrement(&parked);
	WaitForSingleObject(never, INFINITE);
	sink += i;
}

__attribute__((noinline)) void middle(int i)
{
	leaf_wait(i);
	sink ^= 1;
}

__attribute__((noinline)) void outer(int i)
{
	middle(i);
	sink ^= 2;
}

typedef HRESULT(WINAPI *set_desc_fn)(HANDLE, PCWSTR);

__attribute__((noinline)) DWORD WINAPI worker(LPVOID arg)
{
	set_desc_fn set_desc = (set_desc_fn)GetProcAddress(GetModuleHandleA("kernel32.dll"), "SetThreadDescription");
	if (set_desc) {
		WCHAR name[16] = L"parked-0";
		name[7] = L'0' + (int)(INT_PTR)arg % 10;
		set_desc(GetCurrentThread(), name);
	}
	outer((int)(INT_PTR)arg);
	sink ^= 3;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	int n = atoi(argv[1]);
	never = CreateEventA(NULL, TRUE, FALSE, NULL);
	for (int i = 0; i < n; i++)
		if (!CreateThread(NULL, 64 << 10, worker, (LPVOID)(INT_PTR)i, 0, NULL))
			return 3;
	while (parked < n)
		Sleep(1);
	Sleep(50);
	if (argc > 4) {
		HANDLE f = CreateFileA(argv[4], GENERIC_WRITE, 0, NULL, CREATE_ALWAYS, 0, NULL);
		if (f == INVALID_HANDLE_VALUE)
			return 4;
		if (!MiniDumpWriteDump(GetCurrentProcess(), GetCurrentProcessId(), f, MiniDumpNormal, NULL, NULL, NULL))
			return 5;
		CloseHandle(f);
		return 0;
	}
	FILE *p = fopen(argv[3], "w");
	if (!p)
		return 6;
	fprintf(p, "%lu\n", GetCurrentProcessId());
	fclose(p);
	Sleep(atoi(argv[2]) * 1000);
	return 0;
}
