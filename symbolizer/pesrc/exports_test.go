package pesrc

import (
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestOracleExports: a DLL with no symbols, no debug information and no
// PDB (clang for the MSVC target, lld-link without /debug) is named from
// its export table: named exports, an export by ordinal only and a
// forwarder, each reaching to the next. Every byte of its code is held to
// llvm-symbolizer 19.
func TestOracleExports(t *testing.T) {
	testbuild.Need(t, oracle, "the oracle for PE symbol tables (apt-get install llvm-19)")
	testbuild.Need(t, "lld-link", "to link the export fixture")
	obj := testbuild.Build(t, testbuild.Cmd{
		Tool:   "clang",
		Args:   []string{"--target=x86_64-pc-windows-msvc", "-O2", "-c", "-o", "{dir}/lib.obj", "{in0}"},
		Inputs: []string{"../pe/testdata/lib.c"},
		Out:    "lib.obj",
	})
	dll := testbuild.Build(t, testbuild.Cmd{
		Tool:   "lld-link",
		Args:   []string{"/dll", "/noentry", "/nodefaultlib", "/def:{in1}", "/out:{dir}/lib.dll", "{in0}"},
		Inputs: []string{obj, "../pe/testdata/lib.def"},
		Out:    "lib.dll",
	})
	src := open(t, dll)
	if src.HasDWARF() || src.HasPDB() {
		t.Fatal("the export fixture should have neither DWARF nor PDB")
	}
	vas := textVAs(t, dll, 1<<20) // every byte
	theirs := llvmBlocks(t, dll, vas)
	ours := ourBlocks(t, src, vas)
	named, unnamed := 0, 0
	for i, a := range vas {
		if theirs[i][0] == '\n' && "??"+theirs[i] == ours[i] {
			// An export by ordinal only has no name: llvm-symbolizer
			// prints an empty line for it, we print "??" as for any
			// unknown function.
			unnamed++
			continue
		}
		if ours[i] != theirs[i] {
			t.Fatalf("%#x: ours\n%sllvm-symbolizer-19\n%s", a, ours[i], theirs[i])
		}
		if ours[i][:2] != "??" {
			named++
		}
	}
	if named == 0 {
		t.Fatal("no address named from the exports")
	}
	t.Logf("%d addresses, %d named from exports, identical to %s; %d in the export without a name, printed ?? where %s prints an empty line",
		len(vas), named, oracle, unnamed, oracle)
}
