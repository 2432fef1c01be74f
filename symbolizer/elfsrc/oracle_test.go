package elfsrc

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/internal/fixture"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// corpus describes one oracle binary: the script that builds it from
// testdata, the file to symbolize, and optionally a separate debug file.
type corpus struct {
	name   string
	srcs   []string
	tools  []string
	script string
	bin    string // product to symbolize
	debug  string // separate debug file, if any
	oracle string // what llvm-symbolizer reads, if not bin
}

func corpora() []corpus {
	c := []string{"testdata/prog.c"}
	cc := []string{"testdata/stl.cc"}
	rs := []string{"testdata/rust/main.rs"}
	return []corpus{
		{name: "gcc-O0", srcs: c, tools: []string{"gcc"}, script: "gcc -O0 -g -o prog prog.c", bin: "prog"},
		{name: "gcc-O2-dwarf5", srcs: c, tools: []string{"gcc"}, script: "gcc -O2 -g -gdwarf-5 -o prog prog.c", bin: "prog"},
		{name: "gcc-O2-dwarf4", srcs: c, tools: []string{"gcc"}, script: "gcc -O2 -g -gdwarf-4 -o prog prog.c", bin: "prog"},
		{name: "clang-O2", srcs: c, tools: []string{"clang"}, script: "clang -O2 -g -o prog prog.c", bin: "prog"},
		{name: "gcc-O2-zlib", srcs: c, tools: []string{"gcc"}, script: "gcc -O2 -g -gz=zlib -o prog prog.c", bin: "prog"},
		{name: "gcc-O2-zlib-gnu", srcs: c, tools: []string{"gcc"}, script: "gcc -O2 -g -gz=zlib-gnu -o prog prog.c", bin: "prog"},
		// llvm-symbolizer 14 cannot read zstd sections: it reads the
		// uncompressed twin.
		{name: "gcc-O2-zstd", srcs: c, tools: []string{"gcc", "objcopy"}, script: "gcc -O2 -g -o prog prog.c && objcopy --compress-debug-sections=zstd prog prog.zstd",
			bin: "prog.zstd", oracle: "prog"},
		{name: "gcc-O2-split", srcs: c, tools: []string{"gcc", "objcopy"}, script: "gcc -O2 -g -o prog prog.c && objcopy --only-keep-debug prog prog.debug && objcopy --strip-all --add-gnu-debuglink=prog.debug prog prog.stripped",
			bin: "prog.stripped", debug: "prog.debug"},
		{name: "g++-O2", srcs: cc, tools: []string{"g++"}, script: "g++ -O2 -g -o stl stl.cc", bin: "stl"},
		{name: "clang++-O2-dwarf4", srcs: cc, tools: []string{"clang++"}, script: "clang++ -O2 -g -gdwarf-4 -o stl stl.cc", bin: "stl"},
		{name: "clang++-O2-dwarf5", srcs: cc, tools: []string{"clang++"}, script: "clang++ -O2 -g -gdwarf-5 -o stl stl.cc", bin: "stl"},
		{name: "rust-legacy", srcs: rs, tools: []string{"rustc"}, script: "rustc -C debuginfo=2 -O -o rs main.rs", bin: "rs"},
		{name: "rust-v0", srcs: rs, tools: []string{"rustc"}, script: "rustc -C debuginfo=2 -O -C symbol-mangling-version=v0 -o rs main.rs", bin: "rs"},
	}
}

// textAddrs returns up to max addresses spread over the executable
// sections of the file.
func textAddrs(t *testing.T, path string, max int) []uint64 {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var total uint64
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 {
			total += s.Size
		}
	}
	stride := total/uint64(max) + 1
	var out []uint64
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		for a := s.Addr; a < s.Addr+s.Size; a += stride {
			out = append(out, a)
		}
	}
	return out
}

// llvmBlocks runs llvm-symbolizer on addrs and splits its output per address.
func llvmBlocks(t *testing.T, bin string, addrs []uint64) []string {
	var in bytes.Buffer
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	cmd := exec.Command("llvm-symbolizer", "--obj", bin)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	blocks := strings.SplitAfter(string(out), "\n\n")
	if len(blocks) > 0 && blocks[len(blocks)-1] == "" {
		blocks = blocks[:len(blocks)-1]
	}
	if len(blocks) != len(addrs) {
		t.Fatalf("llvm-symbolizer printed %d blocks for %d addresses", len(blocks), len(addrs))
	}
	return blocks
}

// knownDifference explains why our block may differ from llvm-symbolizer's
// and still be right; "" when the difference is unexplained.
//
// Known differences:
//   - llvm14-demangler: LLVM 14's Itanium demangler gives up on some names
//     (pack expansions inside expressions, e.g. std::swap's enable_if with
//     __and_<__not_<...>...>) and prints them mangled; we print them
//     demangled. Accepted when demangling LLVM's name gives ours.
//   - demangle-sr-subst: github.com/ianlancetaylor/demangle adds a
//     substitution candidate for a templated qualifier of an unresolved
//     name ("sr3std24__is_bitwise_relocatableIT_EE5value", clang's
//     mangling of std::__relocate_a_1), so later back references (S1_)
//     resolve to the wrong entity and the name differs in its parameter
//     types. LLVM and GNU c++filt are right here; this is a bug of the
//     dependency, not of the symbolizer, and is recognized by the
//     mangled name (see srTemplatedQualifier).
//
// Rust v0 names ("_R…") are held to llvm-cxxfilt-19 instead of the
// llvm-symbolizer above (see v0Oracle); the differences from it that
// remain are the demangle package's, each recognized by its mangled form
// (see v0Differences).
//
// Not excused, and so counted as disagreements: other differences between
// the two demanglers' rendering of one mangled name, seen in libstdc++
// (about 0.15% of its addresses; every file:line still agrees): LLVM 14
// parenthesizes template-argument expressions ("!(x::value)"), drops
// the names of some constructors and destructors of abi-tagged classes
// ("failure[abi:cxx11]::(…)", "~()"), and renders generic-lambda
// parameters and enum substitutions differently.
//
// raw holds our frames with names left mangled; v0 is the Rust v0
// oracle.
func knownDifference(ours, theirs string, raw []symbolizer.Frame, v0 *v0Oracle) string {
	a, b := strings.Split(ours, "\n"), strings.Split(theirs, "\n")
	if len(a) != len(b) {
		return ""
	}
	why := ""
	for i := range a {
		if a[i] == b[i] {
			continue
		}
		if i%2 == 0 && strings.HasPrefix(b[i], "_Z") && symbolizer.Demangle(b[i]) == a[i] {
			why = "llvm14-demangler"
			continue
		}
		if i%2 == 0 && i/2 < len(raw) && strings.HasPrefix(raw[i/2].Function, "_R") {
			// v0 names were replaced by llvm-cxxfilt-19's in theirs
			// (v0Oracle); only a listed bug of the demangle package
			// explains a difference.
			if w := v0Difference(raw[i/2].Function, a[i], b[i], v0); w != "" {
				why = w
				continue
			}
			return ""
		}
		if i%2 == 0 && i/2 < len(raw) && srTemplatedQualifier(raw[i/2].Function) {
			why = "demangle-sr-subst"
			continue
		}
		return ""
	}
	return why
}

func TestOracleLLVMSymbolizer(t *testing.T) {
	testbuild.Need(t, "llvm-symbolizer", "llvm-symbolizer is the oracle")
	for _, c := range corpora() {
		t.Run(c.name, func(t *testing.T) {
			dir := fixture.Build(t, c.srcs, c.tools, c.script)
			bin := filepath.Join(dir, c.bin)
			opts := &Options{}
			if c.debug != "" {
				opts.DebugFile = filepath.Join(dir, c.debug)
			}
			oracle := bin
			if c.oracle != "" {
				oracle = filepath.Join(dir, c.oracle)
			}
			checkOracle(t, bin, oracle, opts, 4000)
		})
	}
}

func checkOracle(t *testing.T, bin, oracle string, opts *Options, max int) {
	addrs := textAddrs(t, bin, max)
	theirs := llvmBlocks(t, oracle, addrs)
	src, err := Open(bin, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	rawOpts := *opts
	rawOpts.NoDemangle = true
	rawSrc, err := Open(bin, &rawOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer rawSrc.Close()
	// Rust v0 names are held to llvm-cxxfilt-19: every v0 function line
	// of llvm-symbolizer's answer is replaced by its demangling of the
	// name our frame carries.
	raws := make([][]symbolizer.Frame, len(addrs))
	v0 := &v0Oracle{}
	for i, a := range addrs {
		raws[i], err = rawSrc.Symbolize(a, nil)
		if err != nil {
			t.Fatalf("%#x: %v", a, err)
		}
		for _, f := range raws[i] {
			if strings.HasPrefix(f.Function, "_R") {
				v0.add(f.Function)
			}
		}
	}
	v0.run(t)
	var frames []symbolizer.Frame
	var buf []byte
	exact, inlined, v0Frames := 0, 0, 0
	known := map[string]int{}
	var bad []string
	for i, a := range addrs {
		frames, err = src.Symbolize(a, frames[:0])
		if err != nil {
			t.Fatalf("%#x: %v", a, err)
		}
		if len(frames) > 1 {
			inlined++
		}
		buf = symbolizer.AppendLLVM(buf[:0], frames)
		ours := string(buf)
		want, n := v0.replace(theirs[i], raws[i])
		v0Frames += n
		if ours == want {
			exact++
			continue
		}
		if why := knownDifference(ours, want, raws[i], v0); why != "" {
			known[why]++
			continue
		}
		bad = append(bad, fmt.Sprintf("%#x:\n%s", a, lineDiff(ours, want)))
	}
	n := len(addrs)
	agree := float64(n-len(bad)) / float64(n) * 100
	t.Logf("%s: %d addresses (%d with inlined frames, %d Rust v0 frames named by llvm-cxxfilt-19): %d identical, known differences %v, unexplained %d; agreement %.2f%%",
		filepath.Base(bin), n, inlined, v0Frames, exact, known, len(bad), agree)
	for i, b := range bad {
		if i == 5 {
			break
		}
		t.Logf("difference %d/%d at %s", i+1, len(bad), b)
	}
	if len(bad) > 0 {
		os.WriteFile(filepath.Join(os.TempDir(), "rawstack-oracle-"+filepath.Base(bin)+".diff"), []byte(strings.Join(bad, "\n")), 0o644)
	}
	if n < 1000 {
		t.Errorf("only %d addresses; the corpus should give thousands", n)
	}
	if agree < 99.5 {
		t.Errorf("agreement %.2f%% with llvm-symbolizer, want >= 99.5%%", agree)
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

// srTemplatedQualifier reports whether a mangled name holds an unresolved
// name whose qualifier levels start with a source name carrying template
// arguments ("sr3std8is_arrayIT_EE"), the construct the demangle package
// counts as a substitution candidate and LLVM does not.
func srTemplatedQualifier(mangled string) bool {
	for i := 0; i+2 < len(mangled); i++ {
		if mangled[i] != 's' || mangled[i+1] != 'r' {
			continue
		}
		j := i + 2
		if j < len(mangled) && mangled[j] == 'N' {
			j++
		}
		// one or more <source-name> [<template-args>] levels
		for j < len(mangled) && mangled[j] >= '0' && mangled[j] <= '9' {
			n := 0
			for j < len(mangled) && mangled[j] >= '0' && mangled[j] <= '9' {
				n = n*10 + int(mangled[j]-'0')
				j++
			}
			j += n
			if j < len(mangled) && mangled[j] == 'I' {
				return true
			}
		}
	}
	return false
}

// goKnownDifference explains differences between our pclntab answers for
// a stripped Go binary and llvm-symbolizer's DWARF answers for the same
// binary unstripped:
//   - go-autogenerated: the runtime tables name compiler-generated code
//     "<autogenerated>"; llvm-symbolizer joins the DWARF compilation
//     directory "." into "././<autogenerated>".
//   - go-abi0: assembly functions are named without the ".abi0" suffix
//     of their ELF symbol.
//   - pclntab-more: llvm-symbolizer knows nothing ("??") where the
//     runtime tables name the function or its file (equality and hash
//     functions the compiler generates have no DWARF subprogram).
func goKnownDifference(ours, theirs string) string {
	a, b := strings.Split(ours, "\n"), strings.Split(theirs, "\n")
	if len(a) != len(b) {
		return ""
	}
	why := ""
	for i := range a {
		switch {
		case a[i] == b[i]:
		case strings.HasPrefix(b[i], "././<autogenerated>:") && strings.TrimPrefix(b[i], "././") == a[i]:
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

// TestOracleGlibc compares answers for the installed glibc, read through
// its separate debug file from Debian's libc6-dbg (found by build id), with
// llvm-symbolizer's for the same file.
func TestOracleGlibc(t *testing.T) {
	testbuild.Need(t, "llvm-symbolizer", "llvm-symbolizer is the oracle")
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(libc)
	if err != nil {
		testbuild.Skip(t, "no %s: %v", libc, err)
	}
	id := locate.BuildID(f)
	f.Close()
	res, err := locate.Find(locate.Request{Path: libc, BuildID: id}, nil)
	if err != nil || res.Debug == "" {
		testbuild.Skip(t, "glibc's debug file is not installed (apt-get install libc6-dbg): %v", err)
	}
	t.Run("debug-file", func(t *testing.T) {
		checkOracle(t, res.Debug, res.Debug, &Options{}, 4000)
	})
	t.Run("binary+debug-file", func(t *testing.T) {
		checkOracle(t, libc, libc, &Options{DebugFile: res.Debug}, 4000)
	})
}

// TestOracleLibstdcxx compares answers for Debian's debug build of
// libstdc++ (package libstdc++6-12-dbg), an 11 MB C++ library with full
// DWARF 5, with llvm-symbolizer's.
func TestOracleLibstdcxx(t *testing.T) {
	testbuild.Need(t, "llvm-symbolizer", "llvm-symbolizer is the oracle")
	const lib = "/usr/lib/x86_64-linux-gnu/debug/libstdc++.so.6.0.30"
	if _, err := os.Stat(lib); err != nil {
		testbuild.Skip(t, "%s missing (apt-get install libstdc++6-12-dbg)", lib)
	}
	checkOracle(t, lib, lib, &Options{}, 4000)
}

func TestOracleGo(t *testing.T) {
	testbuild.Need(t, "llvm-symbolizer", "llvm-symbolizer is the oracle")
	dir := fixture.Build(t, []string{"testdata/goprog/main.go"}, []string{"go"},
		"printf 'module goprog\\ngo 1.22\\n' > go.mod && CGO_ENABLED=0 go build -trimpath=false -o full . && CGO_ENABLED=0 go build -ldflags='-s -w' -o stripped .")
	t.Run("dwarf", func(t *testing.T) {
		checkOracle(t, filepath.Join(dir, "full"), filepath.Join(dir, "full"), &Options{}, 4000)
	})
	t.Run("stripped-pclntab", func(t *testing.T) {
		full, stripped := filepath.Join(dir, "full"), filepath.Join(dir, "stripped")
		addrs := textAddrs(t, stripped, 4000)
		theirs := llvmBlocks(t, full, addrs)
		src, err := Open(stripped, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		if src.HasDWARF() || src.gopcln == nil {
			t.Fatal("the stripped binary should be read through its pclntab")
		}
		var frames []symbolizer.Frame
		known := map[string]int{}
		inlined, exact := 0, 0
		var bad []string
		for i, a := range addrs {
			frames, _ = src.Symbolize(a, frames[:0])
			if len(frames) > 1 {
				inlined++
			}
			ours := string(symbolizer.AppendLLVM(nil, frames))
			if ours == theirs[i] {
				exact++
				continue
			}
			if why := goKnownDifference(ours, theirs[i]); why != "" {
				known[why]++
				continue
			}
			bad = append(bad, fmt.Sprintf("%#x:\n%s", a, lineDiff(ours, theirs[i])))
		}
		agree := float64(len(addrs)-len(bad)) / float64(len(addrs)) * 100
		t.Logf("%d addresses (%d with inlined frames): %d identical, known differences %v, unexplained %d; agreement %.2f%%",
			len(addrs), inlined, exact, known, len(bad), agree)
		for i, b := range bad {
			if i == 5 {
				break
			}
			t.Logf("difference %d/%d at %s", i+1, len(bad), b)
		}
		if inlined < 100 {
			t.Errorf("only %d addresses with inlined frames: the inline tree is not read", inlined)
		}
		if agree < 99.5 {
			t.Errorf("agreement %.2f%%, want >= 99.5%%", agree)
		}
	})
}
