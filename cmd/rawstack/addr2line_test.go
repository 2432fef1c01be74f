package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// buildProg compiles the symbolizer's C corpus with gcc -O2 -g, cached by
// the shared fixture builder.
func buildProg(t *testing.T) string {
	t.Helper()
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "gcc",
		Args:   []string{"-O2", "-g", "-o", "{dir}/prog", "{in0}"},
		Inputs: []string{"../../symbolizer/elfsrc/testdata/prog.c"},
		Out:    "prog",
	})
}

func TestAddr2lineMatchesLLVMSymbolizer(t *testing.T) {
	llvm, err := exec.LookPath("llvm-symbolizer")
	if err != nil {
		testbuild.Skip(t, "llvm-symbolizer not installed (apt-get install llvm)")
	}
	bin := buildProg(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	text := f.Section(".text")
	f.Close()
	var args []string
	for a := text.Addr; a < text.Addr+text.Size; a += 7 {
		args = append(args, fmt.Sprintf("%#x", a))
	}
	args = append(args, "0x0", "not-a-number", "12")
	cmd := exec.Command(llvm, "--obj", bin)
	cmd.Stdin = strings.NewReader(strings.Join(args, "\n") + "\n")
	want, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	// Addresses as arguments.
	var out, errb bytes.Buffer
	if code := run(append([]string{"addr2line", "--obj", bin}, args...), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	compareLines(t, out.String(), string(want))
	// Addresses on standard input.
	r, w, _ := os.Pipe()
	go func() {
		w.WriteString(strings.Join(args, "\n") + "\n")
		w.Close()
	}()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old }()
	out.Reset()
	if code := run([]string{"addr2line", "--obj", bin}, &out, &errb); code != 0 {
		t.Fatalf("stdin: exit %d: %s", code, errb.String())
	}
	compareLines(t, out.String(), string(want))
}

func compareLines(t *testing.T, got, want string) {
	t.Helper()
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	if len(g) != len(w) {
		t.Errorf("%d lines, llvm-symbolizer printed %d", len(g), len(w))
	}
	bad := 0
	for i := 0; i < len(g) && i < len(w); i++ {
		if g[i] != w[i] {
			if bad < 5 {
				t.Errorf("line %d: %q, llvm-symbolizer: %q", i+1, g[i], w[i])
			}
			bad++
		}
	}
}

// writeTrace maps bin into a process as the loader would and records
// samples in nearest (called from main).
func writeTrace(t *testing.T, bin string) string { return writeTraceAs(t, bin, bin) }

// writeTraceAs records bin as if it had been at recorded on the host.
func writeTraceAs(t *testing.T, bin, recorded string) string {
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	addr := map[string]uint64{}
	for _, s := range syms {
		addr[s.Name] = s.Value
	}
	path := filepath.Join(t.TempDir(), "trace.rawstack")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := format.NewWriter(out, format.Header{OS: format.OSLinux, Arch: format.ArchAMD64, Clock: format.ClockMonotonic, PointerSize: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const bias = 0x555555554000
	id := uint64(1)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			start := p.Vaddr &^ 0xfff
			w.WriteModuleLoad(&format.ModuleLoad{Time: 1, Pid: 9, ID: id, Base: bias + start, Size: (p.Vaddr + p.Memsz - start + 0xfff) &^ 0xfff,
				FileOffset: p.Off &^ 0xfff, Kind: format.ModuleELF, Path: recorded})
			id++
		}
	}
	w.WriteStack(1, []uint64{bias + addr["nearest"] + 4, bias + addr["main"] + 0x20})
	w.WriteStack(2, []uint64{0xdead0000})
	for i := 0; i < 30; i++ {
		w.WriteSample(format.Sample{Time: int64(10 + i), Pid: 9, Tid: 9, Weight: 1000000, Stack: 1})
	}
	for i := 0; i < 10; i++ {
		w.WriteSample(format.Sample{Time: int64(50 + i), Pid: 9, Tid: 9, Weight: 1000000, Stack: 2})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	return path
}

func TestReportAndConvert(t *testing.T) {
	bin := buildProg(t)
	trace := writeTrace(t, bin)
	var out, errb bytes.Buffer
	if code := run([]string{"report", trace, "--top", "3", "--no-debuginfod"}, &out, &errb); code != 0 {
		t.Fatalf("report: exit %d: %s", code, errb.String())
	}
	rep := out.String()
	for _, want := range []string{"40 samples", "Top 3 by self", "nearest  [" + bin + "]", "75.00%", "0xdead0000", "25.00%"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	out.Reset()
	if code := run([]string{"convert", trace, "--to", "folded", "--no-debuginfod"}, &out, &errb); code != 0 {
		t.Fatalf("convert folded: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), ";nearest 30\n") || !strings.Contains(out.String(), "0xdead0000 10\n") {
		t.Errorf("folded output:\n%s", out.String())
	}
	pb := filepath.Join(t.TempDir(), "p.pb.gz")
	if code := run([]string{"convert", trace, "--to", "pprof", "-o", pb, "--no-debuginfod"}, &out, &errb); code != 0 {
		t.Fatalf("convert pprof: exit %d: %s", code, errb.String())
	}
	fh, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	p, err := profile.Parse(fh)
	if err != nil {
		t.Fatalf("pprof output: %v", err)
	}
	if len(p.Sample) != 2 || p.Sample[0].Value[0]+p.Sample[1].Value[0] != 40 {
		t.Errorf("pprof samples %v", p.Sample)
	}
	if code := run([]string{"convert", trace, "--to", "svg"}, &out, &errb); code != 2 {
		t.Errorf("convert --to svg: exit %d, want usage error 2", code)
	}
}

func TestReportPathMap(t *testing.T) {
	bin := buildProg(t)
	trace := writeTraceAs(t, bin, "/build/host/out/prog")
	var out, errb bytes.Buffer
	if code := run([]string{"report", trace, "--no-debuginfod"}, &out, &errb); code != 0 {
		t.Fatalf("report: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "prog+0x") || strings.Contains(out.String(), "nearest") {
		t.Errorf("without the file, locations should stay prog+0xoff:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"report", trace, "--no-debuginfod", "--path-map", "/build/host/out=" + filepath.Dir(bin)}, &out, &errb); code != 0 {
		t.Fatalf("report --path-map: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "nearest") {
		t.Errorf("--path-map did not find the binary:\n%s", out.String())
	}
}
