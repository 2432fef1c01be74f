package pesrc

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// The fixtures: Windows programs built on Linux from testdata, the way
// people ship them.

const goMod = "printf 'module goprog\\ngo 1.22\\n' > go.mod"

// goPE builds ../elfsrc/testdata/goprog (the ELF oracle tests' program) for windows/amd64 three ways in one
// directory (so that the source paths in the tables agree): full.exe as
// go build makes it (DWARF compressed into .zdebug_* sections),
// plain.exe with -compressdwarf=false, stripped.exe with -s -w. It
// returns the path of the named one.
func goPE(t testing.TB, name string) string {
	t.Helper()
	testbuild.Need(t, "go", "to build the Go for Windows fixtures")
	full := testbuild.Build(t, testbuild.Cmd{
		Tool: "sh",
		Args: []string{"-c", goMod + " && cp {in0} . && go build -trimpath=false -o full.exe . && " +
			"go build -trimpath=false -ldflags=-compressdwarf=false -o plain.exe . && go build -ldflags='-s -w' -o stripped.exe ."},
		Inputs: []string{"../elfsrc/testdata/goprog/main.go"},
		Env:    []string{"GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0"},
		Out:    "full.exe",
		Key:    goVersion(),
	})
	return filepath.Join(filepath.Dir(full), name)
}

func goVersion() string {
	return runtime.Version()
}

// mingwGCC builds testdata/prog.c with mingw-w64 gcc -O2 -g: DWARF inside
// the PE, long section names, a COFF symbol table.
func mingwGCC(t testing.TB) string {
	t.Helper()
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "x86_64-w64-mingw32-gcc",
		Args:   []string{"-O2", "-g", "-o", "{dir}/prog.exe", "{in0}"},
		Inputs: []string{"../elfsrc/testdata/prog.c"},
		Out:    "prog.exe",
	})
}

const mingwLibDir = "/usr/lib/gcc/x86_64-w64-mingw32/12-win32"

// clangPE builds the C and C++ sources of ../pdb/testdata with clang for
// x86_64-w64-mingw32 and lld. With pdb, user code carries CodeView in
// prog.pdb (the mingw runtime still carries DWARF); without, DWARF.
func clangPE(t testing.TB, pdb bool) string {
	t.Helper()
	testbuild.Need(t, "ld.lld", "to link the clang PE fixtures")
	if _, err := os.Stat(mingwLibDir); err != nil {
		testbuild.Skip(t, "mingw-w64 libgcc dir %s missing (apt-get install mingw-w64): %v", mingwLibDir, err)
	}
	args := []string{"--target=x86_64-w64-mingw32", "-O2", "-g", "-fuse-ld=lld", "-L" + mingwLibDir, "-fno-exceptions", "-fno-rtti"}
	if pdb {
		args = append(args, "-gcodeview", "-Wl,--pdb={dir}/prog.pdb")
	} else {
		args = append(args, "-gdwarf")
	}
	args = append(args, "-x", "c", "{in0}/prog.c", "-x", "c++", "{in0}/shapes.cpp", "{in0}/interp.cpp", "-o", "{dir}/prog.exe")
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "clang++",
		Args:   args,
		Inputs: []string{"../pdb/testdata"},
		Out:    "prog.exe",
	})
}

// mingwGCC32 builds testdata/prog.c for 32-bit Windows (i686), whose C
// names carry x86 decorations ("_main").
func mingwGCC32(t testing.TB) string {
	t.Helper()
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "i686-w64-mingw32-gcc",
		Args:   []string{"-O2", "-g", "-o", "{dir}/prog32.exe", "{in0}"},
		Inputs: []string{"../elfsrc/testdata/prog.c"},
		Out:    "prog32.exe",
	})
}

// mingwGXX builds testdata/stl.cc with mingw-w64 g++ -O2 -g: C++ with
// libstdc++ templates inlined, Itanium names in the COFF symbols.
func mingwGXX(t testing.TB) string {
	t.Helper()
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "x86_64-w64-mingw32-g++",
		Args:   []string{"-O2", "-g", "-o", "{dir}/stl.exe", "{in0}"},
		Inputs: []string{"../elfsrc/testdata/stl.cc"},
		Out:    "stl.exe",
	})
}

// rustPE builds testdata/rust/main.rs for x86_64-pc-windows-gnu with
// Debian's rustc and its Windows standard library
// (libstd-rust-dev-windows): DWARF inside the PE, legacy Rust mangling.
func rustPE(t testing.TB) string {
	t.Helper()
	const rustc = "/usr/bin/rustc" // rustup's rustc has no Windows std here
	if _, err := os.Stat("/usr/lib/rustlib/x86_64-pc-windows-gnu"); err != nil {
		testbuild.Skip(t, "Rust's Windows standard library is not installed (apt-get install libstd-rust-dev-windows)")
	}
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   rustc,
		Args:   []string{"--target", "x86_64-pc-windows-gnu", "-C", "debuginfo=2", "-O", "-o", "{dir}/rs.exe", "{in0}"},
		Inputs: []string{"../elfsrc/testdata/rust/main.rs"},
		Out:    "rs.exe",
	})
}
