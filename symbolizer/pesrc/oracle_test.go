package pesrc

import (
	"bytes"
	"debug/pe"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
)

const oracle = "llvm-symbolizer-19"

// textVAs returns about n virtual addresses spread evenly over the
// executable sections of the image (every Nth byte).
func textVAs(t testing.TB, path string, n int) []uint64 {
	t.Helper()
	f, err := pe.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var base uint64
	switch oh := f.OptionalHeader.(type) {
	case *pe.OptionalHeader64:
		base = oh.ImageBase
	case *pe.OptionalHeader32:
		base = uint64(oh.ImageBase)
	}
	var total uint64
	for _, s := range f.Sections {
		if s.Characteristics&scnExecute != 0 {
			total += uint64(s.VirtualSize)
		}
	}
	stride := total/uint64(n) + 1
	var out []uint64
	for _, s := range f.Sections {
		if s.Characteristics&scnExecute == 0 {
			continue
		}
		for a := uint64(0); a < uint64(s.VirtualSize); a += stride {
			out = append(out, base+uint64(s.VirtualAddress)+a)
		}
	}
	return out
}

// llvmBlocks runs llvm-symbolizer-19 on vas and splits its output per
// address.
func llvmBlocks(t testing.TB, bin string, vas []uint64) []string {
	t.Helper()
	var in bytes.Buffer
	for _, a := range vas {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	cmd := exec.Command(oracle, "--obj", bin)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --obj %s: %v", oracle, bin, err)
	}
	blocks := strings.SplitAfter(string(out), "\n\n")
	if len(blocks) > 0 && blocks[len(blocks)-1] == "" {
		blocks = blocks[:len(blocks)-1]
	}
	if len(blocks) != len(vas) {
		t.Fatalf("%s printed %d blocks for %d addresses", oracle, len(blocks), len(vas))
	}
	return blocks
}

// ourBlocks symbolizes vas with the package, printed as llvm-symbolizer prints.
func ourBlocks(t testing.TB, src *Source, vas []uint64) []string {
	t.Helper()
	va := src.ByVA()
	out := make([]string, len(vas))
	var frames []symbolizer.Frame
	var buf []byte
	for i, a := range vas {
		var err error
		frames, err = va.Symbolize(a, frames[:0])
		if err != nil {
			t.Fatalf("%#x: %v", a, err)
		}
		buf = symbolizer.AppendLLVM(buf[:0], frames)
		out[i] = string(buf)
	}
	return out
}

// tally counts the outcome of an oracle comparison.
type tally struct {
	name    string
	n       int
	inlined int
	exact   int
	known   map[string]int
	bad     []string
}

func (c *tally) add(va uint64, ours, theirs, why string) {
	c.n++
	if strings.Count(ours, "\n") > 3 {
		c.inlined++
	}
	switch {
	case ours == theirs:
		c.exact++
	case why != "":
		if c.known == nil {
			c.known = map[string]int{}
		}
		c.known[why]++
	default:
		c.bad = append(c.bad, fmt.Sprintf("%#x:\n%s", va, lineDiff(ours, theirs)))
	}
}

// check logs the figures and fails below min agreement (identical or
// explained) or with fewer than 1000 addresses.
func (c *tally) check(t *testing.T, min float64) {
	t.Helper()
	agree := float64(c.n-len(c.bad)) / float64(c.n) * 100
	t.Logf("%s: %d addresses (%d with inlined frames): %d identical to %s, known differences %v, unexplained %d; agreement %.2f%%",
		c.name, c.n, c.inlined, c.exact, oracle, c.known, len(c.bad), agree)
	for i, b := range c.bad {
		if i == 5 {
			break
		}
		t.Logf("difference %d/%d at %s", i+1, len(c.bad), b)
	}
	if len(c.bad) > 0 {
		os.WriteFile(filepath.Join(os.TempDir(), "rawstack-pe-oracle-"+c.name+".diff"), []byte(strings.Join(c.bad, "\n")), 0o644)
	}
	if c.n < 1000 {
		t.Errorf("only %d addresses; the fixture should give thousands", c.n)
	}
	if agree < min {
		t.Errorf("agreement %.2f%% with %s, want >= %.2f%%", agree, oracle, min)
	}
}

// lineDiff shows the lines of two blocks that differ.
func lineDiff(ours, theirs string) string {
	a, b := strings.Split(ours, "\n"), strings.Split(theirs, "\n")
	var sb strings.Builder
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			fmt.Fprintf(&sb, "  line %d:\n    ours: %s\n    llvm: %s\n", i, x, y)
		}
	}
	return sb.String()
}

func open(t testing.TB, path string) *Source {
	t.Helper()
	src, err := Open(path, &Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// compareDirect holds our answers for an image to llvm-symbolizer-19's
// for the same image.
func compareDirect(t *testing.T, name, exe string) *tally {
	testbuild.Need(t, oracle, "the oracle for DWARF inside PE (apt-get install llvm-19)")
	vas := textVAs(t, exe, 4000)
	theirs := llvmBlocks(t, exe, vas)
	ours := ourBlocks(t, open(t, exe), vas)
	c := &tally{name: name}
	for i, a := range vas {
		c.add(a, ours[i], theirs[i], "")
	}
	return c
}

// TestOracleMingwGCC: mingw-w64 gcc -O2 -g, DWARF 5 inside the PE under
// long section names, COFF symbols over it.
func TestOracleMingwGCC(t *testing.T) {
	exe := mingwGCC(t)
	src := open(t, exe)
	if !src.HasDWARF() {
		t.Fatal("the mingw image's DWARF (long section names) was not found")
	}
	c := compareDirect(t, "mingw-gcc", exe)
	if c.inlined < 50 {
		t.Errorf("only %d addresses with inlined frames", c.inlined)
	}
	c.check(t, 99.9)
}

// TestOracleMingwGCC32: the same for 32-bit Windows, where
// llvm-symbolizer strips the x86 C decorations ("_f", "_f@12") of names.
func TestOracleMingwGCC32(t *testing.T) {
	exe := mingwGCC32(t)
	c := compareDirect(t, "mingw-gcc-i686", exe)
	c.check(t, 99.9)
}

// TestOracleMingwGXX: C++ from mingw-w64 g++ -O2 -g. Known difference:
//   - llvm-demangler-gives-up: LLVM 19's demangler, like LLVM 14's, leaves
//     some names mangled (a pack expansion inside an expression, as in
//     std::swap's enable_if<__and_<__not_<...>...>>); we print them
//     demangled. Accepted when demangling LLVM's name gives ours.
func TestOracleMingwGXX(t *testing.T) {
	exe := mingwGXX(t)
	testbuild.Need(t, oracle, "the oracle for DWARF inside PE (apt-get install llvm-19)")
	vas := textVAs(t, exe, 4000)
	theirs := llvmBlocks(t, exe, vas)
	ours := ourBlocks(t, open(t, exe), vas)
	c := &tally{name: "mingw-g++"}
	for i, a := range vas {
		c.add(a, ours[i], theirs[i], demanglerGivesUp(ours[i], theirs[i]))
	}
	if c.inlined < 100 {
		t.Errorf("only %d addresses with inlined frames", c.inlined)
	}
	c.check(t, 99.9)
}

// demanglerGivesUp says "llvm-demangler-gives-up" when the two blocks
// differ only in function lines that llvm-symbolizer left mangled and we
// demangled the same name.
func demanglerGivesUp(ours, theirs string) string {
	a, b := strings.Split(ours, "\n"), strings.Split(theirs, "\n")
	if len(a) != len(b) || ours == theirs {
		return ""
	}
	for i := range a {
		if a[i] != b[i] && (i%2 != 0 || !strings.HasPrefix(b[i], "_Z") || symbolizer.DemangleLLVM19(b[i]) != a[i]) {
			return ""
		}
	}
	return "llvm-demangler-gives-up"
}

// TestOracleRust: a Rust program for x86_64-pc-windows-gnu (DWARF inside
// the PE, its standard library's too).
func TestOracleRust(t *testing.T) {
	exe := rustPE(t)
	c := compareDirect(t, "rust-windows-gnu", exe)
	if c.inlined < 100 {
		t.Errorf("only %d addresses with inlined frames", c.inlined)
	}
	c.check(t, 99.9)
}

// TestOracleClangDWARF: clang --target=x86_64-w64-mingw32 -gdwarf, linked
// by lld.
func TestOracleClangDWARF(t *testing.T) {
	exe := clangPE(t, false)
	c := compareDirect(t, "clang-dwarf", exe)
	c.check(t, 99.9)
}

// TestOracleGo: a Go program for Windows with its DWARF. The Go linker
// compresses DWARF in PE (.zdebug_*), which llvm-symbolizer 19 does not
// read (it names the functions from the COFF symbols only): the oracle
// is llvm-symbolizer 19 on the same program linked with
// -compressdwarf=false, whose code and symbols are the same (checked).
func TestOracleGo(t *testing.T) {
	full := goPE(t, "full.exe")
	plain := goPE(t, "plain.exe")
	t.Run("uncompressed", func(t *testing.T) {
		c := compareDirect(t, "go-plain", plain)
		c.check(t, 99.9)
	})
	t.Run("zdebug", func(t *testing.T) {
		testbuild.Need(t, oracle, "the oracle for DWARF inside PE (apt-get install llvm-19)")
		sameCode(t, full, plain)
		vas := textVAs(t, full, 4000)
		theirs := llvmBlocks(t, plain, vas)
		src := open(t, full)
		if !src.HasDWARF() {
			t.Fatal("the Go image's compressed DWARF was not read")
		}
		ours := ourBlocks(t, src, vas)
		c := &tally{name: "go-zdebug"}
		for i, a := range vas {
			c.add(a, ours[i], theirs[i], "")
		}
		c.check(t, 99.9)
	})
	t.Run("stripped-pclntab", func(t *testing.T) {
		testbuild.Need(t, oracle, "the oracle for DWARF inside PE (apt-get install llvm-19)")
		stripped := goPE(t, "stripped.exe")
		src := open(t, stripped)
		if src.HasDWARF() || !src.HasGoTables() {
			t.Fatal("the stripped Go image should be read through its pclntab")
		}
		vas := textVAs(t, stripped, 4000)
		theirs := llvmBlocks(t, plain, vas)
		ours := ourBlocks(t, src, vas)
		c := &tally{name: "go-stripped"}
		for i, a := range vas {
			c.add(a, ours[i], theirs[i], goKnownDifference(ours[i], theirs[i]))
		}
		if c.inlined < 100 {
			t.Errorf("only %d addresses with inlined frames: the inline tree is not read", c.inlined)
		}
		c.check(t, 99.5)
	})
}

// sameCode checks that two images have the same executable sections'
// addresses and the same function symbols at the same addresses, so one's
// answers are the other's.
func sameCode(t *testing.T, a, b string) {
	t.Helper()
	ia, ib := open(t, a), open(t, b)
	fa, fb := textSyms(t, ia), textSyms(t, ib)
	if len(fa) == 0 || len(fa) != len(fb) {
		t.Fatalf("%s has %d text symbols, %s %d", a, len(fa), b, len(fb))
	}
	for i := range fa {
		if fa[i] != fb[i] {
			t.Fatalf("text symbol %d: %s has %v, %s %v", i, a, fa[i], b, fb[i])
		}
	}
}

func textSyms(t *testing.T, s *Source) []string {
	syms, err := symbols(s.img)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sec := range s.img.PE.Sections {
		if sec.Characteristics&scnExecute == 0 {
			continue
		}
		lo, hi := s.base+uint64(sec.VirtualAddress), s.base+uint64(sec.VirtualAddress)+uint64(sec.VirtualSize)
		out = append(out, fmt.Sprintf("section %s %#x-%#x", sec.Name, lo, hi))
		for _, y := range syms {
			if y.Addr >= lo && y.Addr < hi {
				out = append(out, fmt.Sprintf("%#x %s", y.Addr, y.Name))
			}
		}
	}
	return out
}

// goKnownDifference explains differences between the runtime tables'
// answers for a stripped Go image and llvm-symbolizer's DWARF answers for
// it unstripped:
//   - go-autogenerated: the tables name compiler-generated code
//     "<autogenerated>"; llvm-symbolizer 19 joins the DWARF 5 directory
//     0, ".", into "./<autogenerated>".
//   - go-abi0: assembly functions are named without the ".abi0" suffix
//     of their symbol.
//   - pclntab-more: llvm-symbolizer knows nothing ("??") where the tables
//     name the function or its file.
func goKnownDifference(ours, theirs string) string {
	a, b := strings.Split(ours, "\n"), strings.Split(theirs, "\n")
	if len(a) != len(b) {
		return ""
	}
	why := ""
	for i := range a {
		switch {
		case a[i] == b[i]:
		case strings.HasPrefix(b[i], "./<autogenerated>:") && strings.TrimPrefix(b[i], "./") == a[i]:
			why = "go-autogenerated"
		case i%2 == 0 && b[i] == a[i]+".abi0":
			why = "go-abi0"
		case b[i] == "??" || strings.HasPrefix(b[i], "??:0:"):
			why = "pclntab-more"
		default:
			return ""
		}
	}
	return why
}

// TestOracleClangPDB: clang with -gcodeview and lld's PDB. The image also
// holds the mingw runtime's DWARF, so llvm-symbolizer 19 reads only the
// DWARF and prints "??" for the program's own code. Each address is held
// to llvm-symbolizer 19's answer from the source that answers it: the
// image as it is where a DWARF unit covers the address, else the same
// image with its .debug_info section renamed away, which llvm-symbolizer
// 19 then reads through the PDB.
func TestOracleClangPDB(t *testing.T) {
	testbuild.Need(t, oracle, "the oracle for DWARF inside PE (apt-get install llvm-19)")
	exe := clangPE(t, true)
	src := open(t, exe)
	if !src.HasDWARF() || !src.HasPDB() {
		t.Fatalf("want DWARF (mingw runtime) and PDB, have DWARF %v PDB %v (%v)", src.HasDWARF(), src.HasPDB(), src.PDBError())
	}
	hidden := hideDWARF(t, exe)
	vas := textVAs(t, exe, 4000)
	asIs := llvmBlocks(t, exe, vas)
	viaPDB := llvmBlocks(t, hidden, vas)
	ours := ourBlocks(t, src, vas)
	c := &tally{name: "clang-pdb"}
	fromDWARF, fromPDB, llvmBlind := 0, 0, 0
	for i, a := range vas {
		if src.dwarf.InDWARF(a) {
			fromDWARF++
			c.add(a, ours[i], asIs[i], "")
			continue
		}
		fromPDB++
		why := ""
		if ours[i] == viaPDB[i] && ours[i] != asIs[i] {
			// llvm-symbolizer 19 ignores the PDB of an image with DWARF.
			why = "llvm19-ignores-pdb"
			llvmBlind++
		} else if ours[i] != asIs[i] {
			c.add(a, ours[i], viaPDB[i], "")
			continue
		}
		c.add(a, ours[i], asIs[i], why)
	}
	t.Logf("%d addresses answered from the runtime's DWARF, %d from the PDB (%d of them \"??\" to llvm-symbolizer 19, which reads no PDB here)", fromDWARF, fromPDB, llvmBlind)
	if fromDWARF < 100 || fromPDB < 100 {
		t.Errorf("want both sources used, DWARF %d, PDB %d", fromDWARF, fromPDB)
	}
	c.check(t, 99.9)
}

// hideDWARF copies an image and its PDB into a temporary directory with
// the name of .debug_info changed (in the COFF string table, where lld
// keeps long section names), so that llvm-symbolizer reads the PDB.
func hideDWARF(t *testing.T, exe string) string {
	t.Helper()
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte(".debug_info\x00")); n != 1 {
		t.Fatalf("%s: .debug_info named %d times", exe, n)
	}
	b = bytes.Replace(b, []byte(".debug_info\x00"), []byte(".hidden_dwf\x00"), 1)
	dir := t.TempDir()
	out := filepath.Join(dir, filepath.Base(exe))
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	pdb, err := os.ReadFile(filepath.Join(filepath.Dir(exe), "prog.pdb"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prog.pdb"), pdb, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
