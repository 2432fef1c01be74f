package symsrv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/pdb"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

type build struct {
	exe, pdb string
	cv       *pe.CodeView
}

var (
	buildMu    sync.Mutex
	buildCache = map[int]*build{}
)

// buildHello builds testdata/hello.c with VARIANT=v with the shared
// fixture builder (prog.exe and prog.pdb) and returns its paths.
// helloTimestamp is the TimeDateStamp of variant 0 of the hello fixture
// (2020-09-13); variant v is linked v seconds later.
const helloTimestamp = 1600000000

func buildHello(t *testing.T, v int) *build {
	t.Helper()
	testbuild.NeedAll(t, "cannot build the PE+PDB fixture", "clang", "lld-link")
	buildMu.Lock()
	defer buildMu.Unlock()
	if b := buildCache[v]; b != nil {
		return b
	}
	// The PDB records the object's path, so the build runs in the output
	// directory and names its files relatively. Each variant is linked
	// with its own fixed TimeDateStamp: lld-link otherwise stamps the
	// current second, so two variants linked within one second (a fresh
	// fixture cache) share TimeDateStamp and SizeOfImage, that is one
	// code id, and are the same build as far as a store can tell.
	exe := testbuild.Build(t, testbuild.Cmd{
		Tool: "sh",
		Args: []string{"-ec", fmt.Sprintf(`clang --target=x86_64-pc-windows-msvc -O1 -g -gcodeview -DVARIANT=%d -c {in0} -o hello.obj
lld-link /debug /nodefaultlib /entry:main /subsystem:console /timestamp:%d hello.obj /out:prog.exe /pdb:prog.pdb`, v, helloTimestamp+v)},
		Inputs: []string{filepath.Join("testdata", "hello.c")},
		Out:    "prog.exe",
	})
	dir := filepath.Dir(exe)
	b := &build{exe: filepath.Join(dir, "prog.exe"), pdb: filepath.Join(dir, "prog.pdb")}
	img, err := pe.Open(b.exe)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if b.cv, err = img.CodeView(); err != nil {
		t.Fatal(err)
	}
	buildCache[v] = b
	return b
}

// isolated copies the image alone into a fresh directory and returns its
// path and a CodeView whose recorded PDB path does not exist, so that only
// the search under test can find the PDB.
func isolated(t *testing.T, b *build) (string, *pe.CodeView) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "prog.exe")
	copyFile(t, b.exe, exe)
	cv := *b.cv
	cv.Path = filepath.Join(dir, "nowhere", "prog.pdb")
	return exe, &cv
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func samePDB(t *testing.T, got, want string) {
	t.Helper()
	a, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s differs from %s", got, want)
	}
}

func TestLocateLocal(t *testing.T) {
	b := buildHello(t, 1)
	other := buildHello(t, 2)
	if b.cv.DebugID() == other.cv.DebugID() {
		t.Fatal("two different builds have the same debug id")
	}
	ctx := context.Background()

	t.Run("recorded path", func(t *testing.T) {
		// The linker recorded the directory the fixture was built in
		// before the cache renamed it into place: record where it is.
		cv := *b.cv
		cv.Path = b.pdb
		p, err := Locate(ctx, "", &cv, &Options{})
		if err != nil || p != cv.Path {
			t.Fatalf("Locate = %q, %v; want the recorded %q", p, err, cv.Path)
		}
	})
	t.Run("no recorded path", func(t *testing.T) {
		// A collector finds PDBs by identity only: neither the recorded
		// path nor the recorded name relative to its working directory.
		cv := *b.cv
		cv.Path = b.pdb
		if p, err := Locate(ctx, "", &cv, &Options{NoRecordedPath: true, CacheDir: t.TempDir()}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Locate = %q, %v; want ErrNotFound", p, err)
		}
		dir := t.TempDir()
		copyFile(t, b.pdb, filepath.Join(dir, "prog.pdb"))
		t.Chdir(dir)
		cv.Path = "prog.pdb"
		if p, err := Locate(ctx, "", &cv, &Options{NoRecordedPath: true, CacheDir: t.TempDir()}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Locate = %q, %v; want ErrNotFound, not the working directory's prog.pdb", p, err)
		}
		if p, err := Locate(ctx, "", &cv, &Options{CacheDir: t.TempDir()}); err != nil {
			t.Fatalf("without NoRecordedPath: Locate = %q, %v; want the working directory's prog.pdb", p, err)
		}
	})
	t.Run("next to image", func(t *testing.T) {
		exe, cv := isolated(t, b)
		if _, err := Locate(ctx, exe, cv, &Options{CacheDir: t.TempDir()}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("found a PDB before one was put anywhere: %v", err)
		}
		// A PDB of another build next to the image must not match.
		copyFile(t, other.pdb, filepath.Join(filepath.Dir(exe), "prog.pdb"))
		if p, err := Locate(ctx, exe, cv, &Options{CacheDir: t.TempDir()}); err == nil {
			t.Fatalf("mismatched PDB accepted: %s", p)
		}
		copyFile(t, b.pdb, filepath.Join(filepath.Dir(exe), "prog.pdb"))
		p, err := Locate(ctx, exe, cv, nil)
		if err != nil {
			t.Fatal(err)
		}
		samePDB(t, p, b.pdb)
	})
	t.Run("debug dir", func(t *testing.T) {
		exe, cv := isolated(t, b)
		flat, store := t.TempDir(), t.TempDir()
		copyFile(t, b.pdb, filepath.Join(store, "prog.pdb", cv.DebugID(), "prog.pdb"))
		p, err := Locate(ctx, exe, cv, &Options{DebugDirs: []string{flat, store}})
		if err != nil {
			t.Fatal(err)
		}
		samePDB(t, p, b.pdb)
		copyFile(t, b.pdb, filepath.Join(flat, "prog.pdb"))
		if p, err = Locate(ctx, exe, cv, &Options{DebugDirs: []string{flat, store}}); err != nil || filepath.Dir(p) != flat {
			t.Fatalf("Locate = %q, %v; want the flat directory first", p, err)
		}
	})
	t.Run("symbol path store with downstream cache", func(t *testing.T) {
		exe, cv := isolated(t, b)
		cache, store := t.TempDir(), t.TempDir()
		copyFile(t, b.pdb, filepath.Join(store, "prog.pdb", cv.DebugID(), "prog.pdb"))
		p, err := Locate(ctx, exe, cv, &Options{SymbolPath: "srv*" + cache + "*" + store})
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(cache, "prog.pdb", cv.DebugID(), "prog.pdb")
		if p != want {
			t.Fatalf("Locate = %q, want the cached copy %q", p, want)
		}
		samePDB(t, p, b.pdb)
	})
	t.Run("lower-case store", func(t *testing.T) {
		exe, cv := isolated(t, b)
		cv2 := *cv
		cv2.Path = filepath.Join(filepath.Dir(cv.Path), "Prog.PDB")
		store := t.TempDir()
		copyFile(t, b.pdb, filepath.Join(store, "prog.pdb", cv.DebugID(), "prog.pdb"))
		p, err := Locate(ctx, exe, &cv2, &Options{SymbolPath: store})
		if err != nil {
			t.Fatal(err)
		}
		samePDB(t, p, b.pdb)
	})
	t.Run("file.ptr", func(t *testing.T) {
		exe, cv := isolated(t, b)
		store := t.TempDir()
		os.MkdirAll(filepath.Join(store, "prog.pdb", cv.DebugID()), 0o755)
		os.WriteFile(filepath.Join(store, "prog.pdb", cv.DebugID(), "file.ptr"), []byte("PATH:"+b.pdb+"\r\n"), 0o644)
		p, err := Locate(ctx, exe, cv, &Options{SymbolPath: store})
		if err != nil || p != b.pdb {
			t.Fatalf("Locate = %q, %v; want %q through file.ptr", p, err, b.pdb)
		}
	})
}

// makeCab compresses src into a one-file MSZIP cabinet with gcab.
func makeCab(t *testing.T, src, name string) []byte {
	t.Helper()
	if _, err := exec.LookPath("gcab"); err != nil {
		testbuild.Skip(t, "gcab not installed: cannot make cabinet-compressed fixtures")
	}
	dir := t.TempDir()
	copyFile(t, src, filepath.Join(dir, name))
	cmd := exec.Command("gcab", "-c", "-z", "out.cab", name)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcab: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.cab"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSymbolServer runs a symbol server on loopback and fetches from it
// through "SRV*cache*http://..." the plain PDB, a cabinet-compressed
// prog.pd_, and a file.ptr redirect.
func TestSymbolServer(t *testing.T) {
	b := buildHello(t, 1)
	pdbBytes, err := os.ReadFile(b.pdb)
	if err != nil {
		t.Fatal(err)
	}
	id := b.cv.DebugID()
	for _, mode := range []string{"pdb", "pd_", "ptr"} {
		t.Run(mode, func(t *testing.T) {
			var hits atomic.Int32
			var paths []string
			var mu sync.Mutex
			files := map[string][]byte{}
			switch mode {
			case "pdb":
				files["/prog.pdb/"+id+"/prog.pdb"] = pdbBytes
			case "pd_":
				files["/prog.pdb/"+id+"/prog.pd_"] = makeCab(t, b.pdb, "prog.pdb")
			case "ptr":
				files["/prog.pdb/"+id+"/file.ptr"] = []byte("PATH:" + b.pdb)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				mu.Lock()
				paths = append(paths, r.URL.Path)
				mu.Unlock()
				if data, ok := files[r.URL.Path]; ok {
					w.Write(data)
					return
				}
				http.NotFound(w, r)
			}))
			defer srv.Close()
			exe, cv := isolated(t, b)
			cache := t.TempDir()
			o := &Options{SymbolPath: "SRV*" + cache + "*" + srv.URL}
			p, err := Locate(context.Background(), exe, cv, o)
			if err != nil {
				t.Fatalf("%v (requests: %q)", err, paths)
			}
			samePDB(t, p, b.pdb)
			if !strings.HasPrefix(paths[0], "/prog.pdb/"+id+"/") {
				t.Errorf("first request %q is not in the symstore layout", paths[0])
			}
			if mode != "ptr" {
				if want := filepath.Join(cache, "prog.pdb", id, "prog.pdb"); p != want {
					t.Errorf("downloaded to %q, want %q", p, want)
				}
				// A second lookup is served by the cache.
				before := hits.Load()
				if _, err := Locate(context.Background(), exe, cv, o); err != nil {
					t.Fatal(err)
				}
				if hits.Load() != before {
					t.Errorf("second lookup asked the server again")
				}
			}
		})
	}
}

func TestOpenPE(t *testing.T) {
	b := buildHello(t, 1)
	img, err := pe.Open(b.exe)
	if err != nil {
		t.Fatal(err)
	}
	exps, err := img.Exports()
	img.Close()
	var rva uint64
	for _, e := range exps {
		if e.Name == "greet" {
			rva = uint64(e.RVA)
		}
	}
	if err != nil || rva == 0 {
		t.Fatalf("exports %+v, %v", exps, err)
	}

	src, err := OpenPE(b.exe, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, ok := src.(*pdb.File); !ok {
		t.Fatalf("OpenPE with the PDB in place returned %T", src)
	}
	fr, err := src.Symbolize(rva, nil)
	if err != nil || len(fr) == 0 || fr[len(fr)-1].Function != "greet" || !strings.HasSuffix(fr[len(fr)-1].File, "hello.c") || fr[len(fr)-1].Line != 3 {
		t.Fatalf("Symbolize(greet) = %+v, %v", fr, err)
	}

	// Without a matching PDB, the exports name the function. Change the
	// image's GUID so that no PDB, not even the one at the recorded path,
	// matches it.
	data, err := os.ReadFile(b.exe)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("RSDS"))
	if i < 0 {
		t.Fatal("no RSDS record in the image")
	}
	data[i+4] ^= 0xFF
	exe := filepath.Join(t.TempDir(), "prog.exe")
	if err := os.WriteFile(exe, data, 0o644); err != nil {
		t.Fatal(err)
	}
	src2, err := OpenPE(exe, &Options{SymbolPath: t.TempDir(), CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	if _, ok := src2.(*pdb.File); ok {
		t.Fatal("a PDB matched an image whose GUID matches none")
	}
	fr, err = src2.Symbolize(rva+2, nil)
	if err != nil || len(fr) != 1 || fr[0].Function != "greet" || fr[0].File != "" {
		t.Fatalf("export fallback Symbolize = %+v, %v", fr, err)
	}
}

func TestParseSymbolPath(t *testing.T) {
	got := parseSymbolPath(`cache*/c1;srv*/s1*https://a.example/s;SRV*https://b.example;srv**http://c.example;/plain;symsrv*symsrv.dll*/s2*http://d.example`, "/def")
	want := []element{
		{stores: []string{"/c1", "/s1", "https://a.example/s"}},
		{stores: []string{"/c1", "/def", "https://b.example"}},
		{stores: []string{"/c1", "/def", "http://c.example"}},
		{stores: []string{"/c1", "/plain"}, flat: true},
		{stores: []string{"/c1", "/s2", "http://d.example"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parseSymbolPath:\n got  %v\n want %v", got, want)
	}
}

func TestExtractCab(t *testing.T) {
	seed, err := os.ReadFile("testdata/seed.cab")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := extractCab(bytes.NewReader(seed), int64(len(seed)), &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "symsrv fuzz seed\n" {
		t.Errorf("seed.cab holds %q", out.String())
	}
	// A multi-block cabinet (the PDB is larger than one 32 KB block).
	b := buildHello(t, 1)
	cab := makeCab(t, b.pdb, "prog.pdb")
	out.Reset()
	if err := extractCab(bytes.NewReader(cab), int64(len(cab)), &out); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(b.pdb)
	if len(want) <= 32768 || !bytes.Equal(out.Bytes(), want) {
		t.Errorf("extracted %d bytes, want the %d-byte PDB", out.Len(), len(want))
	}
}

// FuzzExtractCab feeds mutated cabinets to the extractor; seeded with a
// 98-byte gcab -z cabinet.
func FuzzExtractCab(f *testing.F) {
	seed, err := os.ReadFile("testdata/seed.cab")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		extractCab(bytes.NewReader(b), int64(len(b)), &out)
	})
}
