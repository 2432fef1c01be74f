package testbuild

import (
	"debug/elf"
	"path/filepath"
	"testing"
)

// TestCrossBuild: with RAWSTACK_CROSS_FIXTURES, a Build also leaves the
// fixture built with the arm64 cross compiler where the VM looks for it
// (the same key), and the native build is what the test gets.
func TestCrossBuild(t *testing.T) {
	Need(t, "aarch64-linux-gnu-gcc", "the cross compiler of the arm64 VM's fixtures")
	t.Setenv("RAWSTACK_FIXTURE_CACHE", t.TempDir())
	dir := t.TempDir()
	t.Setenv(envCross, "arm64:"+dir)
	c := Cmd{Tool: "cc", Args: []string{"-O2", "-o", "{dir}/hello", "{in0}"}, Inputs: []string{"testdata/hello.c"}, Out: "hello"}
	native := Build(t, c)
	key, err := crossKey(c, "arm64")
	if err != nil {
		t.Fatal(err)
	}
	cross := filepath.Join(dir, key, "hello")
	if cross == native {
		t.Fatal("the cross build is the native one")
	}
	f, err := elf.Open(cross)
	if err != nil {
		t.Fatalf("no arm64 build where the VM looks: %v", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 {
		t.Errorf("%s: %v, want EM_AARCH64", cross, f.Machine)
	}
	// Another input gives another key.
	c2 := c
	c2.Inputs = []string{"testdata/missing.c"}
	if _, err := crossKey(c2, "arm64"); err == nil {
		t.Error("crossKey of a missing input: no error")
	}
}
