package pe

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

const mingwLibDir = "/usr/lib/gcc/x86_64-w64-mingw32/12-win32"

var (
	dllOnce sync.Once
	dllPath string
	dllErr  string
)

// buildDLL builds testdata/lib.c into a DLL with a PDB (cached by source
// hash) and returns its path.
func buildDLL(t testing.TB) string {
	t.Helper()
	testbuild.NeedAll(t, "cannot build the PE fixture", "clang", "ld.lld", "llvm-readobj")
	if _, err := os.Stat(mingwLibDir); err != nil {
		testbuild.Skip(t, "mingw-w64 libgcc dir missing: %v", err)
	}
	dllOnce.Do(func() {
		src, _ := filepath.Abs("testdata")
		h := sha256.New()
		for _, n := range []string{"lib.c", "lib.def"} {
			b, err := os.ReadFile(filepath.Join(src, n))
			if err != nil {
				dllErr = err.Error()
				return
			}
			h.Write(b)
		}
		cache := testbuild.CacheRoot()
		dir := filepath.Join(cache, "rawstack-test", "pe", hex.EncodeToString(h.Sum(nil))[:16])
		dllPath = filepath.Join(dir, "lib.dll")
		if _, err := os.Stat(filepath.Join(dir, "ok")); err == nil {
			return
		}
		os.MkdirAll(dir, 0o755)
		cmd := exec.Command("clang", "--target=x86_64-w64-mingw32", "-shared", "-O2", "-g", "-gcodeview", "-fuse-ld=lld",
			"-Wl,--pdb=lib.pdb", "-L"+mingwLibDir, filepath.Join(src, "lib.c"), filepath.Join(src, "lib.def"), "-o", "lib.dll")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			dllErr = fmt.Sprintf("building lib.dll: %v\n%s", err, out)
			return
		}
		os.WriteFile(filepath.Join(dir, "ok"), nil, 0o644)
	})
	if dllErr != "" {
		t.Fatal(dllErr)
	}
	return dllPath
}

func readobj(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("llvm-readobj", args...).Output()
	if err != nil {
		t.Fatalf("llvm-readobj %v: %v", args, err)
	}
	return string(out)
}

func TestCodeViewAndIDs(t *testing.T) {
	path := buildDLL(t)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cv, err := f.CodeView()
	if err != nil {
		t.Fatal(err)
	}
	out := readobj(t, "--coff-debug-directory", "--file-headers", path)
	m := regexp.MustCompile(`PDBGUID: \(([0-9A-F ]+)\)\s+PDBAge: (\d+)\s+PDBFileName: (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no PDB info in llvm-readobj output:\n%s", out)
	}
	wantGUID, _ := hex.DecodeString(strings.ReplaceAll(m[1], " ", ""))
	if string(cv.GUID[:]) != string(wantGUID) {
		t.Errorf("GUID %x, llvm-readobj %x", cv.GUID, wantGUID)
	}
	if age, _ := strconv.Atoi(m[2]); uint32(age) != cv.Age {
		t.Errorf("age %d, llvm-readobj %d", cv.Age, age)
	}
	if cv.Path != m[3] || cv.PDBName() != "lib.pdb" {
		t.Errorf("PDB path %q (name %q), llvm-readobj %q", cv.Path, cv.PDBName(), m[3])
	}
	// The debug id is the GUID with its first three fields byte-swapped.
	g := wantGUID
	wantID := fmt.Sprintf("%02X%02X%02X%02X%02X%02X%02X%02X%X%X", g[3], g[2], g[1], g[0], g[5], g[4], g[7], g[6], g[8:], cv.Age)
	if cv.DebugID() != wantID {
		t.Errorf("debug id %s, want %s", cv.DebugID(), wantID)
	}
	ts := regexp.MustCompile(`TimeDateStamp: .*\(0x([0-9A-F]+)\)`).FindStringSubmatch(out)
	sz := regexp.MustCompile(`SizeOfImage: (\d+)`).FindStringSubmatch(out)
	if ts == nil || sz == nil {
		t.Fatalf("no TimeDateStamp/SizeOfImage in llvm-readobj output")
	}
	n, _ := strconv.ParseUint(sz[1], 10, 32)
	tsv, _ := strconv.ParseUint(ts[1], 16, 32)
	if want := fmt.Sprintf("%08X%x", tsv, n); f.CodeID() != want {
		t.Errorf("code id %s, want %s", f.CodeID(), want)
	}
}

func TestExports(t *testing.T) {
	path := buildDLL(t)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exps, err := f.Exports()
	if err != nil {
		t.Fatal(err)
	}
	out := readobj(t, "--coff-exports", path)
	re := regexp.MustCompile(`Export \{\s+Ordinal: (\d+)\s+Name: ?(\S*)\s+RVA: 0x([0-9A-F]+)`)
	want := re.FindAllStringSubmatch(out, -1)
	if len(want) != len(exps) {
		t.Fatalf("%d exports, llvm-readobj %d", len(exps), len(want))
	}
	forwarders := 0
	for i, w := range want {
		e := exps[i]
		rva, _ := strconv.ParseUint(w[3], 16, 32)
		if fmt.Sprint(e.Ordinal) != w[1] || e.Name != w[2] || uint64(e.RVA) != rva {
			t.Errorf("export %d: got %+v, llvm-readobj ordinal %s name %q rva %#x", i, e, w[1], w[2], rva)
		}
		if e.Forwarder != "" {
			forwarders++
			if e.Name != "fwd" || e.Forwarder != "kernel32.GetTickCount" {
				t.Errorf("forwarder %+v", e)
			}
		}
	}
	if forwarders != 1 {
		t.Errorf("%d forwarders, want 1", forwarders)
	}
}

func TestExceptionData(t *testing.T) {
	path := buildDLL(t)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := f.ExceptionData()
	if err != nil {
		t.Fatal(err)
	}
	out := readobj(t, "--unwind", path)
	n := strings.Count(out, "RuntimeFunction {")
	if n == 0 || len(b) != 12*n {
		t.Errorf("exception directory of %d bytes, llvm-readobj lists %d functions", len(b), n)
	}
}
