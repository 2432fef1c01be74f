package main

import (
	"bytes"
	"context"
	"debug/pe"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/fetch"
	rspe "github.com/rawstack/rawstack/symbolizer/pe"
)

var (
	fetchOnce sync.Once
	fetchDir  string
	fetchErr  error
)

// fetchOnPath builds rawstack-fetch (once per test binary) into a
// directory put first on PATH, where findCompanion finds it.
func fetchOnPath(t *testing.T) {
	t.Helper()
	goTool := testbuild.Need(t, "go", "builds the rawstack-fetch companion")
	fetchOnce.Do(func() {
		if fetchDir, fetchErr = os.MkdirTemp("", "rawstack-fetch-"); fetchErr != nil {
			return
		}
		cmd := exec.Command(goTool, "build", "-o", fetchDir, "../rawstack-fetch")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fetchErr = fmt.Errorf("go build rawstack-fetch: %v\n%s", err, out)
		}
	})
	if fetchErr != nil {
		t.Fatal(fetchErr)
	}
	t.Setenv("PATH", fetchDir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// fileServer serves files by URL path and records the paths asked for.
type fileServer struct {
	files map[string]string // URL path → local file
	mu    sync.Mutex
	asked []string
}

func (s *fileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.asked = append(s.asked, r.URL.Path)
	s.mu.Unlock()
	if p, ok := s.files[r.URL.Path]; ok {
		http.ServeFile(w, r, p)
		return
	}
	http.NotFound(w, r)
}

// TestAddr2lineDebuginfodCompanion strips a fixture and serves its debug
// file from a debuginfod server only: addr2line downloads it through the
// rawstack-fetch companion (rawstack links no HTTP client) and prints
// what llvm-symbolizer prints with the debug file at hand.
func TestAddr2lineDebuginfodCompanion(t *testing.T) {
	testbuild.Need(t, "objcopy", "splits the fixture's DWARF into a separate debug file")
	dir := filepath.Dir(testbuild.Build(t, testbuild.Cmd{
		Tool: "sh",
		Args: []string{"-c", `set -e
gcc -O2 -g -Wl,--build-id -o {dir}/full {in0}
id=$(readelf -n {dir}/full | sed -n 's/.*Build ID: //p')
d=$(echo $id | cut -c1-2); r=$(echo $id | cut -c3-)
mkdir -p {dir}/dbg/.build-id/$d
objcopy --only-keep-debug {dir}/full {dir}/dbg/.build-id/$d/$r.debug
objcopy --strip-debug {dir}/full {dir}/prog`},
		Inputs: []string{"../../symbolizer/elfsrc/testdata/prog.c"},
		Out:    "prog",
	}))
	bin, dbgDir := filepath.Join(dir, "prog"), filepath.Join(dir, "dbg")
	dbgs, _ := filepath.Glob(filepath.Join(dbgDir, ".build-id", "*", "*.debug"))
	if len(dbgs) != 1 {
		t.Fatalf("debug files %q", dbgs)
	}
	id := filepath.Base(filepath.Dir(dbgs[0])) + strings.TrimSuffix(filepath.Base(dbgs[0]), ".debug")
	addrs := textAddrs(t, bin, 7)
	want := llvmSymbolize(t, addrs, "--obj", bin, "--debug-file-directory="+dbgDir)
	if !strings.Contains(want, "prog.c:") {
		t.Fatalf("llvm-symbolizer found no lines with --debug-file-directory:\n%.400s", want)
	}
	srv := &fileServer{files: map[string]string{"/buildid/" + id + "/debuginfo": dbgs[0]}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	fetchOnPath(t)
	cache := t.TempDir()
	t.Setenv("DEBUGINFOD_URLS", hs.URL)
	t.Setenv("DEBUGINFOD_CACHE_PATH", cache)
	var out, errb bytes.Buffer
	if code := run(append([]string{"addr2line", "--obj", bin}, addrs...), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	compareLines(t, out.String(), want)
	if _, err := os.Stat(filepath.Join(cache, id, "debuginfo")); err != nil {
		t.Errorf("the download is not in the cache: %v (server asked for %q)", err, srv.asked)
	}
	// The cache answers the second time: no request.
	hs.Close()
	out.Reset()
	if code := run(append([]string{"addr2line", "--obj", bin}, addrs...), &out, &errb); code != 0 {
		t.Fatalf("from the cache: exit %d: %s", code, errb.String())
	}
	compareLines(t, out.String(), want)
}

// TestAddr2linePDBFromSymbolServer serves a PE image's PDB from a symbol
// server only (_NT_SYMBOL_PATH=SRV*cache*URL): addr2line downloads it
// through rawstack-fetch into the cache's symbol-store layout and prints
// what llvm-symbolizer-19 prints with the PDB beside the image.
func TestAddr2linePDBFromSymbolServer(t *testing.T) {
	testbuild.Need(t, "lld-link", "links the PE fixture and its PDB")
	testbuild.Need(t, "llvm-symbolizer-19", "the oracle")
	exe := testbuild.Build(t, testbuild.Cmd{
		Tool: "sh",
		Args: []string{"-c", `set -e
cd {dir}
for s in {in0} {in1} {in2} {in3}; do clang --target=x86_64-pc-windows-msvc -O2 -g -gcodeview -fno-exceptions -fno-rtti -c $s -o $(basename $s).obj; done
lld-link /debug /nodefaultlib /entry:main /subsystem:console prog.c.obj shapes.cpp.obj interp.cpp.obj nocrt.cpp.obj /out:prog.exe /pdb:prog.pdb /pdbaltpath:prog.pdb`},
		Inputs: []string{"../../symbolizer/pdb/testdata/prog.c", "../../symbolizer/pdb/testdata/shapes.cpp",
			"../../symbolizer/pdb/testdata/interp.cpp", "../../symbolizer/pdb/testdata/nocrt.cpp"},
		Out: "prog.exe",
	})
	pdbPath := filepath.Join(filepath.Dir(exe), "prog.pdb")
	f, err := pe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	text := f.Section(".text")
	base := f.OptionalHeader.(*pe.OptionalHeader64).ImageBase
	f.Close()
	var addrs []string
	for rva := text.VirtualAddress; rva < text.VirtualAddress+text.VirtualSize; rva += 3 {
		addrs = append(addrs, fmt.Sprintf("%#x", base+uint64(rva)))
	}
	cmd := exec.Command("llvm-symbolizer-19", "--obj="+exe)
	cmd.Stdin = strings.NewReader(strings.Join(addrs, "\n") + "\n")
	want, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(want), "prog.c:") {
		t.Fatalf("llvm-symbolizer-19 found no lines:\n%.400s", want)
	}
	// The image alone, in a directory of its own.
	alone := filepath.Join(t.TempDir(), "prog.exe")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := rspe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	cv, err := img.CodeView()
	img.Close()
	if err != nil {
		t.Fatal(err)
	}
	key := cv.DebugID()
	// The server's layout: prog.pdb/GUIDAGE/prog.pdb.
	srv := &fileServer{files: map[string]string{"/prog.pdb/" + key + "/prog.pdb": pdbPath}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	fetchOnPath(t)
	cache := t.TempDir()
	t.Setenv("_NT_SYMBOL_PATH", "SRV*"+cache+"*"+hs.URL)
	var out, errb bytes.Buffer
	if code := run(append([]string{"addr2line", "--obj", alone}, addrs...), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if out.String() != string(want) {
		gl, wl := strings.Split(out.String(), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) && i < len(wl); i++ {
			if gl[i] != wl[i] {
				t.Fatalf("output differs from llvm-symbolizer-19 at line %d: got %q, want %q", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("output differs from llvm-symbolizer-19: %d vs %d lines", len(gl), len(wl))
	}
	if _, err := os.Stat(filepath.Join(cache, "prog.pdb", key, "prog.pdb")); err != nil {
		t.Errorf("the PDB is not in the cache: %v", err)
	}
}

// TestCompanionGetter drives rawstack-fetch through the getter rawstack
// registers: concurrent gets over one companion, a 404 that the locators
// must see as fetch.ErrNotFound (symsrv then tries name.pd_ and
// file.ptr), a failure that names the URL, and a cancelled get.
func TestCompanionGetter(t *testing.T) {
	slow := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/file/"):
			w.Write([]byte(r.URL.Path))
		case r.URL.Path == "/slow":
			select {
			case <-slow:
			case <-r.Context().Done():
			}
		case r.URL.Path == "/broken":
			http.Error(w, "broken", http.StatusBadGateway)
		default:
			http.NotFound(w, r)
		}
	}))
	defer hs.Close()
	defer close(slow)
	fetchOnPath(t)
	g := &companionGetter{}
	ctx := context.Background()
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := filepath.Join(dir, fmt.Sprint(i))
			if errs[i] = g.Get(ctx, &fetch.Request{URL: fmt.Sprintf("%s/file/%d", hs.URL, i)}, p); errs[i] == nil {
				if b, _ := os.ReadFile(p); string(b) != fmt.Sprintf("/file/%d", i) {
					errs[i] = fmt.Errorf("file %d holds %q", i, b)
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("get %d: %v", i, err)
		}
	}
	if err := g.Get(ctx, &fetch.Request{URL: hs.URL + "/missing"}, filepath.Join(dir, "m")); !errors.Is(err, fetch.ErrNotFound) {
		t.Errorf("404: %v, want fetch.ErrNotFound", err)
	}
	if err := g.Get(ctx, &fetch.Request{URL: hs.URL + "/broken"}, filepath.Join(dir, "b")); err == nil || errors.Is(err, fetch.ErrNotFound) || !strings.Contains(err.Error(), "/broken") {
		t.Errorf("502: %v, want an error naming the URL", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := g.Get(cctx, &fetch.Request{URL: hs.URL + "/slow"}, filepath.Join(dir, "s")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled get: %v", err)
	}
	// The companion still serves after a cancellation.
	if err := g.Get(ctx, &fetch.Request{URL: hs.URL + "/file/x"}, filepath.Join(dir, "x")); err != nil {
		t.Errorf("get after a cancellation: %v", err)
	}
}
