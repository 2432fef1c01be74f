//go:build linux

package windows

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/internal/wine"
)

const mingwLib = "-L/usr/lib/gcc/x86_64-w64-mingw32/12-win32"

// TestUnderWine runs this package's Windows tests (the *_windows_test.go
// files) under Wine: the test binary is built with GOOS=windows and the C
// fixtures with clang + lld + PDB, whose Z: paths reach the Windows side
// through the environment. Every Windows test must pass; none may skip.
func TestUnderWine(t *testing.T) {
	w := wine.Need(t)
	chain := testbuild.Build(t, testbuild.Cmd{
		Tool: "clang",
		Args: []string{"--target=x86_64-w64-mingw32", "-O2", "-g", "-gcodeview", "-fuse-ld=lld",
			"-Wl,--pdb={dir}/chain.pdb", mingwLib, "-o", "{dir}/chain.exe", "{in0}"},
		Inputs: []string{"testdata/chain.c"},
		Out:    "chain.exe",
	})
	dll := testbuild.Build(t, testbuild.Cmd{
		Tool: "clang",
		Args: []string{"--target=x86_64-w64-mingw32", "-O2", "-g", "-gcodeview", "-fuse-ld=lld", "-shared",
			"-Wl,--pdb={dir}/spin.pdb", mingwLib, "-o", "{dir}/spin.dll", "{in0}"},
		Inputs: []string{"testdata/spin.c"},
		Out:    "spin.dll",
	})
	threads := testbuild.Build(t, testbuild.Cmd{
		Tool: "clang",
		Args: []string{"--target=x86_64-w64-mingw32", "-O2", "-g", "-gcodeview", "-fuse-ld=lld",
			"-Wl,--pdb={dir}/threads.pdb", mingwLib, "-o", "{dir}/threads.exe", "{in0}", "-ldbghelp"},
		Inputs: []string{"testdata/threads.c"},
		Out:    "threads.exe",
	})
	exe := w.GoTest(t, ".")
	tests := []string{"TestSelfSampling", "TestLaunchExits", "TestDLLLoadedAfterStart", "TestHeapHammerNoDeadlock", "TestSampleAllocs",
		"TestOnCPUFilter", "TestOffCPUParked"}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	args := []string{"-test.v", "-test.run", "^(" + strings.Join(tests, "|") + ")$"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := w.Command(ctx, exe, args...)
	cmd.Dir = "."
	cmd.Env = append(cmd.Env, "RAWSTACK_WINE_CHAIN="+wine.Path(chain), "RAWSTACK_WINE_DLL="+wine.Path(dll),
		"RAWSTACK_WINE_THREADS="+wine.Path(threads))
	out, err := cmd.CombinedOutput()
	t.Logf("wine %s:\n%s", exe, out)
	if err != nil {
		t.Fatalf("Windows tests failed under Wine: %v", err)
	}
	for _, name := range tests {
		if !regexp.MustCompile(`(?m)^--- PASS: ` + name + ` `).Match(out) {
			t.Errorf("%s did not pass under Wine (skipped or missing)", name)
		}
	}
}
