package cpython

import "testing"

func TestMaybePython(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/bin/python3.11": true, "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0": true,
		"/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0": true, "python3.8": true,
		"/usr/bin/python3": false, "/usr/lib/libc.so.6": false, "/opt/python3.x/bin/tool": false, "/usr/bin/pythonista": false,
	} {
		if got := MaybePython(path); got != want {
			t.Errorf("MaybePython(%q) = %v, want %v", path, got, want)
		}
	}
	if maj, mnr, ok := pyVersionOf("/x/libpython3.10.so.1.0"); !ok || maj != 3 || mnr != 10 {
		t.Errorf("libpython3.10.so.1.0: %d.%d %v", maj, mnr, ok)
	}
}
