package main

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// textAddrs returns every step-th address of bin's .text.
func textAddrs(t *testing.T, bin string, step uint64) []string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	text := f.Section(".text")
	if text == nil {
		t.Fatalf("%s: no .text", bin)
	}
	var args []string
	for a := text.Addr; a < text.Addr+text.Size; a += step {
		args = append(args, fmt.Sprintf("%#x", a))
	}
	return args
}

// llvmSymbolize runs llvm-symbolizer with flags on addrs (on standard input).
func llvmSymbolize(t *testing.T, addrs []string, flags ...string) string {
	t.Helper()
	llvm := testbuild.Need(t, "llvm-symbolizer", "the oracle addr2line's output is compared with")
	cmd := exec.Command(llvm, flags...)
	cmd.Stdin = strings.NewReader(strings.Join(addrs, "\n") + "\n")
	cmd.Env = append(os.Environ(), "DEBUGINFOD_URLS=")
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer %v: %v", flags, err)
	}
	return string(want)
}

// TestAddr2lineFindsLibcDebugFile runs addr2line on the system's libc with
// no flags, as a new user would, against llvm-symbolizer with no flags:
// both must find libc6-dbg's file under /usr/lib/debug/.build-id by build
// id and print the same lines.
func TestAddr2lineFindsLibcDebugFile(t *testing.T) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(libc)
	if err != nil {
		testbuild.Skip(t, "no %s: %v", libc, err)
	}
	id := locate.BuildID(f)
	f.Close()
	h := hex.EncodeToString(id)
	if len(h) < 3 {
		t.Fatalf("%s: no build id", libc)
	}
	dbg := filepath.Join(locate.DefaultDebugDir, ".build-id", h[:2], h[2:]+".debug")
	if _, err := os.Stat(dbg); err != nil {
		testbuild.Skip(t, "glibc's debug file %s is not installed (apt-get install libc6-dbg)", dbg)
	}
	addrs := textAddrs(t, libc, 4099)
	want := llvmSymbolize(t, addrs, "--obj", libc)
	t.Setenv("DEBUGINFOD_URLS", "")
	var out, errb bytes.Buffer
	if code := run(append([]string{"addr2line", "--obj", libc}, addrs...), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	compareLines(t, out.String(), want)
	// The debug file must have been used: most addresses name a source line.
	if n, unknown := len(addrs), strings.Count(out.String(), "??:0:0"); unknown*4 > n {
		t.Errorf("%d of %d addresses have no source line: the debug file was not found", unknown, n)
	}
}

// TestAddr2lineDebugFileDirectory strips a fixture, puts its DWARF in a
// private build-id directory and compares addr2line
// --debug-file-directory=DIR with llvm-symbolizer given the same flag.
func TestAddr2lineDebugFileDirectory(t *testing.T) {
	testbuild.Need(t, "objcopy", "splits the fixture's DWARF into a separate debug file")
	dir := filepath.Dir(testbuild.Build(t, testbuild.Cmd{
		Tool: "sh",
		Args: []string{"-c", `set -e
gcc -O2 -g -Wl,--build-id -o {dir}/full {in0}
id=$(readelf -n {dir}/full | sed -n 's/.*Build ID: //p')
d=$(echo $id | cut -c1-2); r=$(echo $id | cut -c3-)
mkdir -p {dir}/dbg/.build-id/$d
objcopy --only-keep-debug {dir}/full {dir}/dbg/.build-id/$d/$r.debug
objcopy --strip-debug {dir}/full {dir}/prog`},
		Inputs: []string{"../../symbolizer/elfsrc/testdata/prog.c"},
		Out:    "prog",
	}))
	bin, dbgDir := filepath.Join(dir, "prog"), filepath.Join(dir, "dbg")
	addrs := textAddrs(t, bin, 5)
	want := llvmSymbolize(t, addrs, "--obj", bin, "--debug-file-directory="+dbgDir)
	if !strings.Contains(want, "prog.c:") {
		t.Fatalf("llvm-symbolizer found no lines with --debug-file-directory:\n%.400s", want)
	}
	t.Setenv("DEBUGINFOD_URLS", "")
	for _, flag := range [][]string{{"--debug-file-directory=" + dbgDir}, {"--debug-file-directory", dbgDir}} {
		var out, errb bytes.Buffer
		if code := run(append(append([]string{"addr2line", "--obj", bin}, flag...), addrs...), &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		compareLines(t, out.String(), want)
	}
}
