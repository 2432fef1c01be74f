package main

import (
	"bufio"
	"bytes"
	"debug/pe"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/pesrc"
	"github.com/rawstack/rawstack/symbolizer/sources"
)

// TestAddr2linePE symbolizes every byte of .text of a clang/lld-link PE
// image through sources.OpenFile and the addr2line printer and compares the
// text with llvm-symbolizer's.
func TestAddr2linePE(t *testing.T) {
	testbuild.NeedAll(t, "the test runs it", "clang", "lld-link", "llvm-symbolizer-19")
	src, _ := filepath.Abs("../../symbolizer/pdb/testdata")
	dir := t.TempDir()
	cc := []string{"clang", "--target=x86_64-pc-windows-msvc", "-O2", "-g", "-gcodeview", "-fno-exceptions", "-fno-rtti", "-c"}
	for _, c := range [][]string{
		append(append([]string{}, cc...), src+"/prog.c", "-o", "prog.obj"),
		append(append([]string{}, cc...), src+"/shapes.cpp", "-o", "shapes.obj"),
		append(append([]string{}, cc...), src+"/interp.cpp", "-o", "interp.obj"),
		append(append([]string{}, cc...), src+"/nocrt.cpp", "-o", "nocrt.obj"),
		{"lld-link", "/debug", "/nodefaultlib", "/entry:main", "/subsystem:console", "prog.obj", "shapes.obj", "interp.obj", "nocrt.obj", "/out:prog.exe", "/pdb:prog.pdb"},
	} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	exe := filepath.Join(dir, "prog.exe")
	if !pesrc.IsPE(exe) {
		t.Fatal("IsPE(prog.exe) = false")
	}
	if pesrc.IsPE(filepath.Join(dir, "prog.obj")) {
		t.Fatal("IsPE(prog.obj) = true")
	}
	f, err := pe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	text := f.Section(".text")
	base := f.OptionalHeader.(*pe.OptionalHeader64).ImageBase
	f.Close()
	var in bytes.Buffer
	for rva := text.VirtualAddress; rva < text.VirtualAddress+text.VirtualSize; rva++ {
		fmt.Fprintf(&in, "%#x\n", base+uint64(rva))
	}
	cmd := exec.Command("llvm-symbolizer-19", "--obj="+exe)
	cmd.Stdin = bytes.NewReader(in.Bytes())
	want, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}

	s, err := sources.OpenFile(exe, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got bytes.Buffer
	w := bufio.NewWriter(&got)
	p := &a2lPrinter{src: s, w: w, inlines: true}
	for _, ln := range strings.Split(strings.TrimSpace(in.String()), "\n") {
		p.line(ln)
	}
	w.Flush()
	if got.String() != string(want) {
		gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) && i < len(wl); i++ {
			if gl[i] != wl[i] {
				t.Fatalf("output differs from llvm-symbolizer at line %d: got %q, want %q", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("output differs from llvm-symbolizer: %d vs %d lines", len(gl), len(wl))
	}
	t.Logf("%d addresses, %d bytes of identical output", text.VirtualSize, got.Len())
	os.Remove(exe)
}
