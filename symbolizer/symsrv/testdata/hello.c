// Fixture for PDB location tests: an exported function with line info.
// VARIANT changes the code, so the two builds have different PDB GUIDs.
__declspec(dllexport) int greet(int n) {
	int s = 0;
	for (int i = 0; i < n; i++)
		s += i * VARIANT;
	return s;
}

int main(int argc, char **argv) {
	(void)argv;
	return greet(argc);
}
