package pdb

import (
	"bytes"
	"crypto/sha256"
	"debug/pe"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// fixture is a PE image and its PDB built by clang from testdata.
type fixture struct {
	name string
	exe  string
	pdb  string
}

var (
	fixtureMu    sync.Mutex
	fixtureCache = map[string]*fixture{}
)

const mingwLibDir = "/usr/lib/gcc/x86_64-w64-mingw32/12-win32"

// fixtureKinds lists the fixture builds: "mingw" (clang for
// x86_64-w64-mingw32 with lld, C and C++ with libstdc++ names), "msvc"
// (clang for x86_64-pc-windows-msvc, lld-link /debug, no CRT) and
// "msvc-columns" (the same with column numbers in the line tables).
var fixtureKinds = []string{"mingw", "msvc", "msvc-columns"}

// buildFixture builds (or takes from the cache) the fixture of a kind. The
// cache key is a hash of the sources and the commands.
func buildFixture(t testing.TB, kind string) *fixture {
	t.Helper()
	testbuild.NeedAll(t, "cannot build or check PDB fixtures", "clang", "lld-link", "ld.lld")
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if fx := fixtureCache[kind]; fx != nil {
		return fx
	}
	src, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var cmds [][]string
	switch kind {
	case "mingw":
		if _, err := os.Stat(mingwLibDir); err != nil {
			testbuild.Skip(t, "mingw-w64 libgcc dir %s missing: %v", mingwLibDir, err)
		}
		cmds = [][]string{{"clang++", "--target=x86_64-w64-mingw32", "-O2", "-g", "-gcodeview", "-fuse-ld=lld",
			"-Wl,--pdb=prog.pdb", "-L" + mingwLibDir, "-fno-exceptions", "-fno-rtti",
			"-x", "c", "SRC/prog.c", "-x", "c++", "SRC/shapes.cpp", "SRC/interp.cpp", "-o", "prog.exe"}}
	case "msvc", "msvc-columns":
		cc := []string{"clang", "--target=x86_64-pc-windows-msvc", "-O2", "-g", "-gcodeview", "-fno-exceptions", "-fno-rtti", "-c"}
		if kind == "msvc-columns" {
			cc = append(cc, "-gcolumn-info")
		}
		cmds = [][]string{
			append(append([]string{}, cc...), "SRC/prog.c", "-o", "prog.obj"),
			append(append([]string{}, cc...), "SRC/shapes.cpp", "-o", "shapes.obj"),
			append(append([]string{}, cc...), "SRC/interp.cpp", "-o", "interp.obj"),
			append(append([]string{}, cc...), "SRC/nocrt.cpp", "-o", "nocrt.obj"),
			{"lld-link", "/debug", "/nodefaultlib", "/entry:main", "/subsystem:console",
				"prog.obj", "shapes.obj", "interp.obj", "nocrt.obj", "/out:prog.exe", "/pdb:prog.pdb"},
		}
	default:
		t.Fatalf("unknown fixture kind %q", kind)
	}
	h := sha256.New()
	for _, n := range []string{"prog.c", "util.h", "shapes.cpp", "shapes.h", "interp.cpp", "nocrt.cpp"} {
		b, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "%q %s", cmds, src)
	cacheRoot := testbuild.CacheRoot()
	dir := filepath.Join(cacheRoot, "rawstack-test", "pdb", kind+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	fx := &fixture{name: kind, exe: filepath.Join(dir, "prog.exe"), pdb: filepath.Join(dir, "prog.pdb")}
	if _, err := os.Stat(filepath.Join(dir, "ok")); err != nil {
		tmp := dir + ".tmp"
		os.RemoveAll(tmp)
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			args := make([]string, len(c))
			for i, a := range c {
				args[i] = strings.ReplaceAll(a, "SRC/", src+"/")
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir = tmp
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("building %s fixture: %v: %v\n%s", kind, args, err, out)
			}
		}
		// The PDB path in the image names tmp; that is fine, the tests
		// open the PDB by its cached path.
		os.RemoveAll(dir)
		if err := os.Rename(tmp, dir); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "ok"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fixtureCache[kind] = fx
	return fx
}

// textRange returns the image base and the RVA range of .text.
func textRange(t testing.TB, exe string) (base uint64, start, end uint32) {
	t.Helper()
	f, err := pe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok {
		t.Fatalf("%s: not PE32+", exe)
	}
	s := f.Section(".text")
	if s == nil {
		t.Fatalf("%s: no .text", exe)
	}
	return oh.ImageBase, s.VirtualAddress, s.VirtualAddress + s.VirtualSize
}

// withoutDWARF returns exe, or for an image that also holds DWARF (the
// mingw runtime's, in the clang/lld mingw fixture) a copy of it and its
// PDB with .debug_info renamed: llvm-symbolizer 19 reads only the DWARF
// of an image that has some, and the PDB reader is what is tested here.
func withoutDWARF(t testing.TB, exe string) string {
	t.Helper()
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(".debug_info\x00")) {
		return exe
	}
	dir := t.TempDir()
	out := filepath.Join(dir, filepath.Base(exe))
	if err := os.WriteFile(out, bytes.Replace(b, []byte(".debug_info\x00"), []byte(".hidden_dwf\x00"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	pdb := strings.TrimSuffix(exe, filepath.Ext(exe)) + ".pdb"
	p, err := os.ReadFile(pdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(pdb)), p, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// llvmSymbolize runs llvm-symbolizer on VAs and returns one block of
// output lines per address, in llvm-symbolizer's text layout (function
// line, file:line:column line, per frame).
func llvmSymbolize(t testing.TB, exe string, vas []uint64) [][]string {
	t.Helper()
	testbuild.Need(t, "llvm-symbolizer-19", "the oracle of PDB line and inline lookups")
	var in bytes.Buffer
	for _, va := range vas {
		fmt.Fprintf(&in, "%#x\n", va)
	}
	// JSON output: the text output cannot be split into blocks when a
	// function name is empty, which the PDB reader prints for addresses
	// without a symbol.
	exe = withoutDWARF(t, exe)
	cmd := exec.Command("llvm-symbolizer-19", "--obj="+exe, "--inlines", "--functions=linkage", "--demangle", "--output-style=JSON")
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	type frame struct {
		FunctionName string
		FileName     string
		Line, Column int
	}
	var res [][]string
	for _, ln := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var rec struct{ Symbol []frame }
		if err := json.Unmarshal([]byte(ln), &rec); err != nil {
			t.Fatalf("llvm-symbolizer output %q: %v", ln, err)
		}
		var b []string
		for _, fr := range rec.Symbol {
			fn, file := fr.FunctionName, fr.FileName
			if fn == "" {
				fn = "??"
			}
			if file == "" {
				file = "??"
			}
			b = append(b, fn, fmt.Sprintf("%s:%d:%d", file, fr.Line, fr.Column))
		}
		if len(b) == 0 {
			b = []string{"??", "??:0:0"}
		}
		res = append(res, b)
	}
	if len(res) != len(vas) {
		t.Fatalf("llvm-symbolizer printed %d records for %d addresses", len(res), len(vas))
	}
	return res
}
