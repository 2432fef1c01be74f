package symsrv

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

// TestExportsAgainstLLVMSymbolizer symbolizes every byte of .text of a
// DLL without debug information through the export fallback and compares
// with llvm-symbolizer, which also names such addresses by exports.
func TestExportsAgainstLLVMSymbolizer(t *testing.T) {
	testbuild.NeedAll(t, "the test runs it", "clang", "lld-link", "llvm-symbolizer")
	src, _ := filepath.Abs("../pe/testdata")
	dir := t.TempDir()
	for _, c := range [][]string{
		{"clang", "--target=x86_64-pc-windows-msvc", "-O2", "-c", src + "/lib.c", "-o", "lib.obj"},
		{"lld-link", "/dll", "/noentry", "/nodefaultlib", "/def:" + src + "/lib.def", "lib.obj", "/out:lib.dll"},
	} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	dll := filepath.Join(dir, "lib.dll")
	img, err := pe.Open(dll)
	if err != nil {
		t.Fatal(err)
	}
	text := img.PE.Section(".text")
	base := img.ImageBase
	img.Close()
	src2, err := OpenPE(dll, &Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	var in bytes.Buffer
	var want []string
	for rva := text.VirtualAddress; rva < text.VirtualAddress+text.VirtualSize; rva++ {
		fmt.Fprintf(&in, "%#x\n", base+uint64(rva))
	}
	cmd := exec.Command("llvm-symbolizer", "--obj="+dll, "--output-style=JSON")
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// {"Address":...,"Symbol":[{..."FunctionName":"add",...}]}
		i := strings.Index(ln, `"FunctionName":"`)
		name := ""
		if i >= 0 {
			rest := ln[i+len(`"FunctionName":"`):]
			name = rest[:strings.IndexByte(rest, '"')]
		}
		want = append(want, name)
	}
	named := 0
	var fr []symbolizer.Frame
	for i, rva := 0, text.VirtualAddress; rva < text.VirtualAddress+text.VirtualSize; i, rva = i+1, rva+1 {
		fr, err = src2.Symbolize(uint64(rva), fr[:0])
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if len(fr) > 0 {
			got = fr[0].Function
		}
		if got != want[i] {
			t.Errorf("rva %#x: %q, llvm-symbolizer %q", rva, got, want[i])
		}
		if got != "" {
			named++
		}
	}
	if named == 0 {
		t.Error("no address named")
	}
}
