package main

import (
	"bytes"
	"debug/pe"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestReportPEModule: `rawstack report` and `convert` name the functions
// of a PE module recorded in a trace (a mingw gcc program loaded at a
// relocated base, as on Windows with ASLR): the CLI links the PE symbol
// source.
func TestReportPEModule(t *testing.T) {
	exe := testbuild.Build(t, testbuild.Cmd{
		Tool:   "x86_64-w64-mingw32-gcc",
		Args:   []string{"-O2", "-g", "-o", "{dir}/prog.exe", "{in0}"},
		Inputs: []string{"../../symbolizer/elfsrc/testdata/prog.c"},
		Out:    "prog.exe",
	})
	f, err := pe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	oh := f.OptionalHeader.(*pe.OptionalHeader64)
	var fib uint64
	for _, s := range f.Symbols {
		if s.Name == "fib" && s.SectionNumber > 0 {
			fib = uint64(f.Sections[s.SectionNumber-1].VirtualAddress) + uint64(s.Value)
		}
	}
	f.Close()
	if fib == 0 {
		t.Fatal("no symbol fib in the fixture")
	}
	const base = 0x7ff7_0000_0000
	path := filepath.Join(t.TempDir(), "pe.rawstack")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := format.NewWriter(out, format.Header{Version: format.Version1, PointerSize: 8, OS: format.OSWindows, Arch: format.ArchAMD64, Clock: format.ClockQPC}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteProcess(format.Process{Time: 1, Pid: 7, Name: "prog.exe"})
	w.WriteThreadStart(format.ThreadStart{Time: 1, Pid: 7, Tid: 8})
	w.WriteModuleLoad(&format.ModuleLoad{Time: 1, Pid: 7, ID: 1, Base: base, Size: uint64(oh.SizeOfImage), Kind: format.ModulePE,
		Path: exe, TimeDateStamp: f.TimeDateStamp, SizeOfImage: oh.SizeOfImage})
	w.WriteStack(1, []uint64{base + fib + 4})
	for i := 0; i < 5; i++ {
		w.WriteSample(format.Sample{Time: int64(2 + i), Pid: 7, Tid: 8, CPU: format.NoCPU, Weight: 1, Stack: 1})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"report", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "fib") || strings.Contains(stdout.String(), "prog.exe+0x") {
		t.Errorf("report does not name fib:\n%s\n%s", stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := run([]string{"convert", path, "--to", "folded"}, &stdout, &stderr); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "fib 5") {
		t.Errorf("convert --to folded: want a fib stack of 5 samples, got\n%s", stdout.String())
	}
}
