package pesrc

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

// traceModule is a PE image put in a test trace at a relocated base, with
// the oracle that answers its virtual addresses.
type traceModule struct {
	name   string
	exe    string // the image
	path   string // the path recorded in the trace
	base   uint64 // where the trace says it was loaded
	oracle func([]uint64) []string
}

// TestTraceModules writes a trace, as the Windows back end will, with PE
// modules loaded at bases other than their preferred ones (ASLR), their
// RSDS and code identities, and stacks of real addresses of the
// fixtures; symbolizer.Build must name every location as llvm-symbolizer
// 19 names the same address of the image (for the clang+PDB image, from
// the source pesrc answers it with, see TestOracleClangPDB). The image of
// the pdb-only module is gone: only its PDB, in a debug directory, is
// found by the recorded GUID and age; the store module's image is only in
// a symbol-store layout of the debug directory, under its code id.
func TestTraceModules(t *testing.T) {
	testbuild.Need(t, oracle, "the oracle for DWARF inside PE (apt-get install llvm-19)")
	mingw := mingwGCC(t)
	goFull, goPlain := goPE(t, "full.exe"), goPE(t, "plain.exe")
	clang := clangPE(t, true)
	hidden := hideDWARF(t, clang)
	clangSrc := open(t, clang)
	direct := func(exe string) func([]uint64) []string {
		return func(vas []uint64) []string { return llvmBlocks(t, exe, vas) }
	}
	mods := []traceModule{
		{name: "mingw", exe: mingw, path: mingw, base: 0x7ff6_1000_0000, oracle: direct(mingw)},
		{name: "go", exe: goFull, path: goFull, base: 0x7ff6_2000_0000, oracle: direct(goPlain)},
		{name: "clang-pdb", exe: clang, path: clang, base: 0x7ff6_3000_0000, oracle: func(vas []uint64) []string {
			asIs, viaPDB := llvmBlocks(t, clang, vas), llvmBlocks(t, hidden, vas)
			for i, a := range vas {
				if !clangSrc.dwarf.InDWARF(a) {
					asIs[i] = viaPDB[i]
				}
			}
			return asIs
		}},
		// Only the PDB is left: the image's recorded path does not exist.
		{name: "pdb-only", exe: clang, path: `C:\build\gone\prog.exe`, base: 0x7ff6_4000_0000, oracle: direct(hidden)},
		// The image is in a symbol store under its code id.
		{name: "store", exe: mingw, path: `D:\ship\prog.exe`, base: 0x7ff6_5000_0000, oracle: direct(mingw)},
	}
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{Version: format.Version1, PointerSize: 8, OS: format.OSWindows, Arch: format.ArchAMD64, Clock: format.ClockQPC}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const pid, tid = 4242, 4243
	w.WriteProcess(format.Process{Time: 1, Pid: pid, Name: "prog.exe"})
	w.WriteThreadStart(format.ThreadStart{Time: 1, Pid: pid, Tid: tid})
	stackID := uint64(1)
	for i, m := range mods {
		img, err := pe.Open(m.exe)
		if err != nil {
			t.Fatal(err)
		}
		ev := &format.ModuleLoad{Time: 2, Pid: pid, ID: uint64(i + 1), Base: m.base, Size: uint64(img.SizeOfImage), Kind: format.ModulePE,
			Path: m.path, TimeDateStamp: img.TimeDateStamp, SizeOfImage: img.SizeOfImage}
		if cv, err := img.CodeView(); err == nil {
			ev.PDBGUID, ev.PDBAge, ev.PDBPath = [16]byte(cv.GUID), cv.Age, cv.Path
		}
		imageBase := img.ImageBase
		img.Close()
		if err := w.WriteModuleLoad(ev); err != nil {
			t.Fatal(err)
		}
		// Stacks of three addresses of .text: a leaf and two callers.
		vas := textVAs(t, m.exe, 600)
		for j := 0; j+3 <= len(vas); j += 3 {
			pcs := []uint64{vas[j] - imageBase + m.base, vas[j+1] - imageBase + m.base, vas[j+2] - imageBase + m.base}
			w.WriteStack(stackID, pcs)
			w.WriteSample(format.Sample{Time: 3, Pid: pid, Tid: tid, CPU: format.NoCPU, Weight: 1, Stack: stackID})
			stackID++
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := format.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// The debug directory holds the PDB only, for the pdb-only module.
	dbg := t.TempDir()
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(clang), "prog.pdb")); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(dbg, "prog.pdb"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := pe.Open(mingw)
	if err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dbg, "prog.exe", img.CodeID())
	img.Close()
	if b, err := os.ReadFile(mingw); err != nil {
		t.Fatal(err)
	} else if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(filepath.Join(store, "prog.exe"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := symbolizer.Build(r, &symbolizer.Options{DebugDirs: []string{dbg}, Warn: func(err error) { t.Errorf("warning: %v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range mods {
		img, err := pe.Open(m.exe)
		if err != nil {
			t.Fatal(err)
		}
		imageBase := img.ImageBase
		img.Close()
		var locs []*symbolizer.Location
		var vas []uint64
		for _, l := range p.Locations {
			if l.Module == nil || l.Module.ID != uint64(i+1) {
				continue
			}
			va := imageBase + l.Addr
			if l.Caller {
				va--
			}
			locs = append(locs, l)
			vas = append(vas, va)
		}
		if len(locs) < 500 {
			t.Errorf("%s: %d locations, want ~600", m.name, len(locs))
			continue
		}
		want := m.oracle(vas)
		named, bad := 0, 0
		for j, l := range locs {
			got := string(symbolizer.AppendLLVM(nil, l.Frames))
			if want[j] == "\n??:0:0\n\n" {
				// llvm-symbolizer's PDB reader prints an empty name
				// where it knows nothing; it means "??".
				want[j] = "??\n??:0:0\n\n"
			}
			if len(l.Frames) > 0 && l.Frames[len(l.Frames)-1].Function != "" {
				named++
			}
			if got != want[j] {
				if bad < 3 {
					t.Errorf("%s: %#x (va %#x): got\n%swant\n%s", m.name, l.Abs, vas[j], got, want[j])
				}
				bad++
			}
		}
		t.Logf("%s: %d locations, %d named, %d differ from %s", m.name, len(locs), named, bad, oracle)
		if named < len(locs)/2 {
			t.Errorf("%s: only %d of %d locations named", m.name, named, len(locs))
		}
	}
}

func TestImageCandidates(t *testing.T) {
	got := imageCandidates(`/src\bin\prog.exe`)
	want := []string{`/src\bin\prog.exe`, "/src/bin/prog.exe"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := imageCandidates("/a/prog.exe"); len(got) != 1 {
		t.Errorf("got %q, want the path alone", got)
	}
}
