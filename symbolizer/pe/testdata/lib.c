// A DLL with named exports, an export by ordinal only (see lib.def) and a
// forwarder, for the export table and CodeView tests.
__declspec(dllexport) int add(int a, int b) { return a + b; }
__declspec(dllexport) int mul(int a, int b) { return a * b; }
__declspec(dllexport) int counter = 3;

int hidden(int x) { return x * 7 + counter; }
