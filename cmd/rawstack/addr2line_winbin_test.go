package main

import (
	"bytes"
	"debug/pe"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestAddr2lineWindowsBinaries runs `rawstack addr2line --obj` on the
// Windows binaries people ship, built here from symbolizer/pesrc's
// testdata, with addresses on standard input, and compares the whole
// output with llvm-symbolizer-19's: a mingw-w64 gcc -O2 -g program (DWARF
// inside the PE) and a Go program for Windows (its DWARF compressed into
// .zdebug sections, which llvm-symbolizer 19 cannot read: its answers come
// from the same program linked with -compressdwarf=false, whose code is
// the same).
func TestAddr2lineWindowsBinaries(t *testing.T) {
	llvm := testbuild.Need(t, "llvm-symbolizer-19", "the oracle for Windows binaries (apt-get install llvm-19)")
	src := "../../symbolizer/elfsrc/testdata"
	mingw := testbuild.Build(t, testbuild.Cmd{
		Tool:   "x86_64-w64-mingw32-gcc",
		Args:   []string{"-O2", "-g", "-o", "{dir}/prog.exe", "{in0}"},
		Inputs: []string{src + "/prog.c"},
		Out:    "prog.exe",
	})
	testbuild.Need(t, "go", "to build the Go for Windows fixture")
	goFull := testbuild.Build(t, testbuild.Cmd{
		Tool: "sh",
		Args: []string{"-c", "printf 'module goprog\\ngo 1.22\\n' > go.mod && cp {in0} . && go build -o full.exe . && " +
			"go build -ldflags=-compressdwarf=false -o plain.exe ."},
		Inputs: []string{src + "/goprog/main.go"},
		Env:    []string{"GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0"},
		Out:    "full.exe",
		Key:    runtime.Version(),
	})
	goPlain := filepath.Join(filepath.Dir(goFull), "plain.exe")
	for _, c := range []struct{ name, exe, oracle string }{
		{"mingw-gcc", mingw, mingw},
		{"go", goFull, goPlain},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := textLines(t, c.exe, 3000)
			cmd := exec.Command(llvm, "--obj", c.oracle)
			cmd.Stdin = strings.NewReader(in)
			want, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			r, w, _ := os.Pipe()
			go func() {
				w.WriteString(in)
				w.Close()
			}()
			old := os.Stdin
			os.Stdin = r
			defer func() { os.Stdin = old }()
			var out, errb bytes.Buffer
			if code := run([]string{"addr2line", "--obj", c.exe}, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			compareLines(t, out.String(), string(want))
			named := strings.Count(out.String(), "\n\n") - strings.Count(out.String(), "??\n??:0:0\n\n")
			t.Logf("%d addresses, %d named, output identical to llvm-symbolizer-19's: %v", strings.Count(in, "\n"), named, out.String() == string(want))
		})
	}
}

// textLines returns about n virtual addresses spread over the image's
// executable sections, one per line.
func textLines(t *testing.T, exe string, n int) string {
	t.Helper()
	f, err := pe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	base := f.OptionalHeader.(*pe.OptionalHeader64).ImageBase
	var total uint64
	for _, s := range f.Sections {
		if s.Characteristics&pe.IMAGE_SCN_MEM_EXECUTE != 0 {
			total += uint64(s.VirtualSize)
		}
	}
	stride := total/uint64(n) + 1
	var sb strings.Builder
	for _, s := range f.Sections {
		if s.Characteristics&pe.IMAGE_SCN_MEM_EXECUTE == 0 {
			continue
		}
		for a := uint64(0); a < uint64(s.VirtualSize); a += stride {
			fmt.Fprintf(&sb, "%#x\n", base+uint64(s.VirtualAddress)+a)
		}
	}
	return sb.String()
}
