package pesrc

import (
	"bytes"
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

// TestBuildLooksInTraceDir symbolizes a trace whose PE module was
// recorded at a path that does not exist here, with the image copied next
// to the trace file: Build, given the Reader of that file, names the
// module's addresses from it; given the same stream with no file name, it
// cannot.
func TestBuildLooksInTraceDir(t *testing.T) {
	exe := goPE(t, "full.exe")
	img, err := pe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	ts, size, imageBase := img.TimeDateStamp, img.SizeOfImage, img.ImageBase
	img.Close()
	dir := t.TempDir()
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.exe"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(dir, "t.rawstack")
	f, err := os.Create(trace)
	if err != nil {
		t.Fatal(err)
	}
	w, err := format.NewWriter(f, format.Header{Version: format.Version1, PointerSize: 8, OS: format.OSWindows, Arch: format.ArchAMD64, Clock: format.ClockQPC}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const pid, tid, base = 7, 8, 0x7ff6_1000_0000
	w.WriteProcess(format.Process{Time: 1, Pid: pid, Name: "app.exe"})
	w.WriteModuleLoad(&format.ModuleLoad{Time: 2, Pid: pid, ID: 1, Base: base, Size: uint64(size), Kind: format.ModulePE,
		Path: `C:\users\me\app.exe`, TimeDateStamp: ts, SizeOfImage: size})
	for i, va := range textVAs(t, exe, 50) {
		w.WriteStack(uint64(i+1), []uint64{va - imageBase + base})
		w.WriteSample(format.Sample{Time: 3, Pid: pid, Tid: tid, CPU: format.NoCPU, Weight: 1, Stack: uint64(i + 1)})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	named := func(r *format.Reader) (n, all int) {
		defer r.Close()
		p, err := symbolizer.Build(r, &symbolizer.Options{SymbolPath: "-", NoDebuginfod: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range p.Locations {
			all++
			if len(l.Frames) > 0 && l.Frames[len(l.Frames)-1].Function != "" {
				n++
			}
		}
		return n, all
	}
	r, err := format.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	if n, all := named(r); all < 40 || n < all*9/10 {
		t.Errorf("from the trace file: %d of %d locations named", n, all)
	}
	fb, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	r, err = format.NewReader(bytes.NewReader(fb))
	if err != nil {
		t.Fatal(err)
	}
	if n, all := named(r); n != 0 {
		t.Errorf("from a stream with no file: %d of %d locations named, want none (the image is only next to the file)", n, all)
	}
}
