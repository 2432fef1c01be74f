/* The peer of rawstack snapshot -p on Windows: dbghelp's MiniDumpWriteDump
 * of another process (every thread's context and stack), as debuggers and
 * crash reporters take it.  dumppid.exe PID FILE */
#include <windows.h>
#include <dbghelp.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	DWORD pid = strtoul(argv[1], NULL, 10);
	HANDLE p = OpenProcess(PROCESS_QUERY_INFORMATION | PROCESS_VM_READ, FALSE, pid);
	if (!p)
		return 3;
	HANDLE f = CreateFileA(argv[2], GENERIC_WRITE, 0, NULL, CREATE_ALWAYS, 0, NULL);
	if (f == INVALID_HANDLE_VALUE)
		return 4;
	if (!MiniDumpWriteDump(p, pid, f, MiniDumpNormal, NULL, NULL, NULL))
		return 5;
	CloseHandle(f);
	return 0;
}
