package rawstackprocessor

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/otlp"
	"github.com/rawstack/rawstack/symbolizer/pdb"
	"github.com/rawstack/rawstack/symbolizer/pe"
	"github.com/rawstack/rawstack/symbolizer/pesrc"
)

const mingwLibDir = "/usr/lib/gcc/x86_64-w64-mingw32/12-win32"

// clangPDB builds the C and C++ sources of symbolizer/pdb/testdata with
// clang for x86_64-w64-mingw32 and lld, the program's debug information
// in prog.pdb (CodeView), the mingw runtime's as DWARF in the image: the
// fixture pesrc's oracle tests hold to llvm-symbolizer.
func clangPDB(t *testing.T) string {
	t.Helper()
	testbuild.Need(t, "clang++", "to build the PE+PDB fixture")
	testbuild.Need(t, "ld.lld", "to link the PE+PDB fixture")
	if _, err := os.Stat(mingwLibDir); err != nil {
		testbuild.Skip(t, "mingw-w64 libgcc dir %s missing (apt-get install mingw-w64): %v", mingwLibDir, err)
	}
	return testbuild.Build(t, testbuild.Cmd{
		Tool: "clang++",
		Args: []string{"--target=x86_64-w64-mingw32", "-O2", "-g", "-fuse-ld=lld", "-L" + mingwLibDir, "-fno-exceptions", "-fno-rtti",
			"-gcodeview", "-Wl,--pdb={dir}/prog.pdb",
			"-x", "c", "{in0}/prog.c", "-x", "c++", "{in0}/shapes.cpp", "{in0}/interp.cpp", "-o", "{dir}/prog.exe"},
		Inputs: []string{"../../symbolizer/pdb/testdata"},
		Out:    "prog.exe",
	})
}

// peTrace is a Windows trace of one process with the fixture loaded at a
// relocated base (as ASLR loads it) and one sample per address: the
// identity a Windows recording stores (path, code id, PDB GUID, age and
// path), not the files.
func peTrace(t *testing.T, img *pe.File, cv *pe.CodeView, rvas []uint64) []byte {
	t.Helper()
	const base = 0x7ff7_1234_0000
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{Version: format.Version1, PointerSize: 8, OS: format.OSWindows, Arch: format.ArchAMD64, Clock: format.ClockQPC}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteProcess(format.Process{Time: 1, Pid: 7, Name: "prog.exe"})
	w.WriteThreadStart(format.ThreadStart{Time: 1, Pid: 7, Tid: 8})
	w.WriteModuleLoad(&format.ModuleLoad{Time: 1, Pid: 7, ID: 1, Base: base, Size: uint64(img.SizeOfImage), Kind: format.ModulePE,
		Path: `C:\app\prog.exe`, TimeDateStamp: img.TimeDateStamp, SizeOfImage: img.SizeOfImage,
		PDBGUID: cv.GUID, PDBAge: cv.Age, PDBPath: `C:\build\prog.pdb`})
	for i, rva := range rvas {
		w.WriteStack(uint64(i+1), []uint64{base + rva})
		w.WriteSample(format.Sample{Time: int64(2 + i), Pid: 7, Tid: 8, CPU: format.NoCPU, Weight: 1, Stack: uint64(i + 1)})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// textRVAs returns up to n addresses spread over the image's .text.
func textRVAs(t *testing.T, img *pe.File, n int) []uint64 {
	t.Helper()
	sec := img.PE.Section(".text")
	if sec == nil {
		t.Fatal("no .text")
	}
	step := max(uint64(sec.VirtualSize)/uint64(n), 1)
	var out []uint64
	for a := uint64(sec.VirtualAddress); a < uint64(sec.VirtualAddress+sec.VirtualSize) && len(out) < n; a += step {
		out = append(out, a)
	}
	return out
}

// frameText renders frames as the processor's lines carry them.
func frameText(frames []symbolizer.Frame) string {
	var s []string
	for _, f := range frames {
		if f.Function != "" {
			s = append(s, fmt.Sprintf("%s:%d", f.Function, f.Line))
		}
	}
	return strings.Join(s, " / ")
}

// locationText renders the lines of the location at address addr.
func locationText(d pprofile.ProfilesDictionary, addr uint64) (string, bool) {
	for _, loc := range d.LocationTable().All() {
		if loc.Address() != addr {
			continue
		}
		var s []string
		for _, l := range loc.Lines().All() {
			fn := d.FunctionTable().At(int(l.FunctionIndex()))
			s = append(s, fmt.Sprintf("%s:%d", d.StringTable().At(int(fn.NameStrindex())), l.Line()))
		}
		return strings.Join(s, " / "), true
	}
	return "", false
}

// store lays out a symbol store (symstore's NAME/KEY/NAME) with copies of
// the given files.
func store(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, src := range files {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPEModulesFromSymbolStores: a raw OTLP request of a Windows process
// (a clang+lld image with its PDB, loaded at a relocated base), sent over
// gRPC to the OTLP receiver, comes out of the processor named, the image and PDB found by the identity the
// mapping attributes carry — rawstack.pe.code_id, rawstack.pdb.guid_age,
// the names — in a local symbol store, or the PDB alone from a symbol
// server over HTTP. Every address is held to pesrc's answer from the
// files as they lie on the build machine (image and PDB side by side).
func TestPEModulesFromSymbolStores(t *testing.T) {
	exe := clangPDB(t)
	img, err := pe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	cv, err := img.CodeView()
	if err != nil {
		t.Fatal(err)
	}
	rvas := textRVAs(t, img, 400)
	data := peTrace(t, img, cv, rvas)
	r, err := format.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	raw, c, err := otlp.Convert(r, otlp.Options{Raw: true}, nil)
	if err != nil || c.Samples != int64(len(rvas)) {
		t.Fatalf("convert: %d samples, %v", c.Samples, err)
	}
	// The mapping carries the PE identity.
	d := raw.Dictionary()
	attrs := map[string]string{}
	for _, ai := range d.MappingTable().At(1).AttributeIndices().All() {
		a := d.AttributeTable().At(int(ai))
		attrs[d.StringTable().At(int(a.KeyStrindex()))] = a.Value().Str()
	}
	codeID := otlp.PECodeID(img.TimeDateStamp, img.SizeOfImage)
	if attrs[otlp.AttrPDBGUIDAge] != cv.DebugID() || attrs[otlp.AttrPECodeID] != codeID || attrs[otlp.AttrPDBPath] != `C:\build\prog.pdb` {
		t.Fatalf("mapping attributes %v, want %s %s and the PDB path", attrs, cv.DebugID(), codeID)
	}
	base := d.MappingTable().At(1).MemoryStart()

	// The oracle: pesrc on the build machine's files.
	host, err := pesrc.Open(exe, &pesrc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if !host.HasPDB() {
		t.Fatalf("pesrc found no PDB beside %s: %v", exe, host.PDBError())
	}
	pdbPath := filepath.Join(filepath.Dir(exe), "prog.pdb")
	pdbOnly, err := pdb.Open(pdbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer pdbOnly.Close()

	req, err := otlp.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	// check sends the raw request through a real pipeline (OTLP gRPC
	// receiver, this processor configured with cfg, a sink) and holds
	// each address's names to the oracle's.
	check := func(t *testing.T, cfg *Config, oracle symbolizer.Source) {
		c := startCollector(t, cfg, "")
		client := &otlp.Client{Endpoint: c.addr, Gzip: true}
		defer client.Close()
		if err := client.Export(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		got := c.sink.AllProfiles()
		if len(got) != 1 {
			t.Fatalf("%d requests came out of the pipeline", len(got))
		}
		out := got[0]
		od := out.Dictionary()
		named, same, shown := 0, 0, 0
		funcs := map[string]bool{}
		for _, rva := range rvas {
			fr, _ := oracle.Symbolize(rva, nil)
			want := frameText(fr)
			got, ok := locationText(od, base+rva)
			if !ok {
				t.Fatalf("no location at %#x", base+rva)
			}
			if got != "" {
				named++
				funcs[strings.SplitN(got, ":", 2)[0]] = true
			}
			if got == want {
				same++
			} else if shown++; shown <= 5 {
				t.Errorf("rva %#x: processor %q, pesrc %q", rva, got, want)
			}
		}
		t.Logf("%d addresses: %d named by the pipeline, %d as pesrc names them; %d functions",
			len(rvas), named, same, len(funcs))
		if same != len(rvas) {
			t.Errorf("%d of %d addresses differ from pesrc", len(rvas)-same, len(rvas))
		}
		if named < len(rvas)/2 || !funcs["main"] {
			t.Errorf("only %d of %d addresses named (main named: %v)", named, len(rvas), funcs["main"])
		}
	}

	t.Run("local store, image and PDB", func(t *testing.T) {
		dir := t.TempDir()
		store(t, dir, map[string]string{
			filepath.Join("prog.exe", codeID, "prog.exe"):       exe,
			filepath.Join("prog.pdb", cv.DebugID(), "prog.pdb"): pdbPath,
		})
		check(t, &Config{DebugDirs: []string{dir}}, host)
	})

	t.Run("symbol server, PDB only", func(t *testing.T) {
		dir := t.TempDir()
		store(t, dir, map[string]string{filepath.Join("prog.pdb", cv.DebugID(), "prog.pdb"): pdbPath})
		var hits atomic.Int64
		fs := http.FileServer(http.Dir(dir))
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			fs.ServeHTTP(w, r)
		}))
		defer srv.Close()
		cache := t.TempDir()
		// Without the image the PDB alone names the addresses: the
		// oracle is the PDB read directly.
		check(t, &Config{SymbolPath: "srv*" + cache + "*" + srv.URL}, pdbOnly)
		if hits.Load() == 0 {
			t.Error("the symbol server was never asked")
		}
		if _, err := os.Stat(filepath.Join(cache, "prog.pdb", cv.DebugID(), "prog.pdb")); err != nil {
			t.Errorf("the download is not in the cache: %v", err)
		}
	})

	t.Run("nothing found", func(t *testing.T) {
		p := pprofile.NewProfiles()
		raw.CopyTo(p)
		proc := newSymbolizer(&Config{DebugDirs: []string{t.TempDir()}, SymbolPath: t.TempDir()}, zap.NewNop())
		out, err := proc.process(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := otlp.Marshal(raw)
		b, _ := otlp.Marshal(out)
		if !bytes.Equal(a, b) || proc.resolved.Load() != 0 {
			t.Errorf("a PE profile with no files to find changed (%d resolved)", proc.resolved.Load())
		}
	})
}
