package pesrc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

func TestWineUnixPath(t *testing.T) {
	for in, want := range map[string]string{
		`Z:\tmp\run\self.exe`: "/tmp/run/self.exe",
		`z:\a.dll`:            "/a.dll",
		`Z:/x/y.exe`:          "/x/y.exe",
		`C:\windows\a.dll`:    "",
		`Z:`:                  "",
		`/tmp/a.exe`:          "",
	} {
		if got := wineUnixPath(in); got != want {
			t.Errorf("wineUnixPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestOpenModuleWhereWineRanIt opens a Go PE recorded as Wine records it,
// on its Z: drive, with no debug directory: the image is found at the Unix
// path. A copy recorded at a path that does not exist here is found in
// the trace's directory by name and code id, and only there.
func TestOpenModuleWhereWineRanIt(t *testing.T) {
	exe := goPE(t, "full.exe")
	img, err := pe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	ts, size := img.TimeDateStamp, img.SizeOfImage
	img.Close()
	mod := func(path string) *symbolizer.Module {
		return &symbolizer.Module{ModuleLoad: format.ModuleLoad{Path: path, Kind: format.ModulePE, TimeDateStamp: ts, SizeOfImage: size}}
	}
	wine := "Z:" + strings.ReplaceAll(exe, "/", `\`)
	o, err := OpenModule(mod(wine), &symbolizer.Options{})
	if err != nil {
		t.Fatalf("%s: %v", wine, err)
	}
	o.Source.Close()
	if o.Path != exe {
		t.Errorf("%s opened as %s, want %s", wine, o.Path, exe)
	}

	dir := t.TempDir()
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.exe"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	gone := `C:\users\me\app.exe`
	if o, err := OpenModule(mod(gone), &symbolizer.Options{SymbolPath: "-"}); err == nil {
		o.Source.Close()
		t.Fatalf("%s found without the trace's directory: %s", gone, o.Path)
	}
	o, err = OpenModule(mod(gone), &symbolizer.Options{SymbolPath: "-", TraceDir: dir})
	if err != nil {
		t.Fatalf("%s in the trace's directory: %v", gone, err)
	}
	o.Source.Close()
	if want := filepath.Join(dir, "app.exe"); o.Path != want {
		t.Errorf("opened %s, want %s", o.Path, want)
	}
}
