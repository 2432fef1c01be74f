package main

import (
	"bytes"
	"debug/pe"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/otlpcheck"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestReportPEModule: `rawstack report` and `convert` to every format name
// the functions of a PE module recorded in a trace (a mingw gcc program
// loaded at a relocated base, as on Windows with ASLR): every command goes
// through symbolizer/sources, the OTLP companion included (its convert
// named no function of a Windows trace when it linked the ELF sources
// only).
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
	checkNamedEverywhere(t, path, []string{"fib"})
}

// convertFormats are the formats of convert.
var convertFormats = []string{"pprof", "perfetto", "chrome", "firefox", "speedscope", "otlp"}

// checkNamedEverywhere converts trace to every format (with the symbol
// options args) and fails t unless each output names every function of
// want.
func checkNamedEverywhere(t *testing.T, trace string, want []string, args ...string) {
	t.Helper()
	// convert --to otlp runs rawstack-otlp, found on PATH here.
	helperDir := t.TempDir()
	if out, err := exec.Command(testbuild.Need(t, "go", "builds rawstack-otlp"), "build", "-o", helperDir, "../rawstack-otlp").CombinedOutput(); err != nil {
		t.Fatalf("go build rawstack-otlp: %v\n%s", err, out)
	}
	t.Setenv("PATH", helperDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, to := range convertFormats {
		conv := filepath.Join(t.TempDir(), "out")
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"convert", trace, "--to", to, "-o", conv}, args...), &stdout, &stderr); code != 0 {
			t.Fatalf("convert --to %s: exit %d: %s", to, code, stderr.String())
		}
		names := functionNames(t, to, conv, want)
		for _, fn := range want {
			if !slices.Contains(names, fn) {
				t.Errorf("convert --to %s does not name %s: %.600q", to, fn, names)
			}
		}
	}
}

// functionNames returns the function names of the file path that
// convert --to to wrote, read back with the format's own decoder (of
// Perfetto's, only which of want it holds).
func functionNames(t *testing.T, to, path string, want []string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	switch to {
	case "pprof":
		p, err := profile.ParseData(data)
		if err != nil {
			t.Fatalf("pprof: %v", err)
		}
		for _, f := range p.Function {
			names = append(names, f.Name)
		}
	case "otlp":
		var u pprofile.ProtoUnmarshaler
		p, err := u.UnmarshalProfiles(data)
		if err != nil {
			t.Fatalf("otlp: %v", err)
		}
		if err := otlpcheck.Check(p); err != nil {
			t.Errorf("otlp: the output does not conform: %v", err)
		}
		d := p.Dictionary()
		for _, f := range d.FunctionTable().All() {
			names = append(names, d.StringTable().At(int(f.NameStrindex())))
		}
	case "perfetto":
		// Function names are interned strings of the trace's packets
		// (InternedData.function_names): the bytes are in the file.
		for _, n := range want {
			if bytes.Contains(data, []byte(n)) {
				names = append(names, n)
			}
		}
	default:
		// JSON: every string value of the document.
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", to, err)
		}
		var walk func(any)
		walk = func(v any) {
			switch v := v.(type) {
			case string:
				names = append(names, v)
			case []any:
				for _, e := range v {
					walk(e)
				}
			case map[string]any:
				for _, e := range v {
					walk(e)
				}
			}
		}
		walk(v)
	}
	return names
}
