package elfsrc

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/procmaps"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
)

// TestRelativeLLD runs arch/testdata/lldchain linked with lld and with
// GNU ld and maps the runtime address of points inside each function of
// the executable and of liblldchain.so (the loader's bias, from
// dl_iterate_phdr, plus the symbol's address) through the executable
// mapping that holds it, as a recorded module (base, file offset), and
// Source.Segments: the module-relative address must be the symbol's, and
// the innermost function there the one llvm-symbolizer names at it. lld
// starts the code segment in the read-only segment's file page at
// p_vaddr != p_offset.
func TestRelativeLLD(t *testing.T) {
	testbuild.NeedAll(t, "the lldchain fixture is built with clang and linked with lld and GNU ld", "clang", "ld.lld", "ld.bfd")
	testbuild.Need(t, "llvm-symbolizer", "llvm-symbolizer is the oracle")
	for _, ld := range []string{"lld", "bfd"} {
		t.Run(ld, func(t *testing.T) {
			exe := testbuild.Build(t, testbuild.Cmd{
				Tool: "sh",
				Args: []string{"-ec", "clang -O2 -g -fomit-frame-pointer -fPIC -shared -fuse-ld=" + ld + " -o liblldchain.so {in0}/lib.c\n" +
					"clang -O2 -g -fomit-frame-pointer -fuse-ld=" + ld + " -o lldchain {in0}/main.c -L. -llldchain -Wl,-rpath,'$ORIGIN'"},
				Inputs: []string{"../../arch/testdata/lldchain"},
				Out:    "lldchain",
				Key:    "clang " + ld,
			})
			lib := filepath.Join(filepath.Dir(exe), "liblldchain.so")
			cmd := exec.Command(exe, "-1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			bias := map[string]uint64{}
			sc := bufio.NewScanner(out)
			for sc.Scan() && sc.Text() != "ready" {
				if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "bias" {
					b, err := strconv.ParseUint(f[2], 16, 64)
					if err != nil {
						t.Fatalf("fixture line %q", sc.Text())
					}
					if f[1] == "-" {
						f[1] = exe
					}
					bias[f[1]] = b
				}
			}
			data, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/maps")
			if err != nil {
				t.Fatal(err)
			}
			maps, err := procmaps.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{exe, lib} {
				f, err := elf.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				syms, err := f.Symbols()
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				src, err := Open(path, &Options{})
				if err != nil {
					t.Fatal(err)
				}
				var rels []uint64
				var ours []string
				for _, s := range syms {
					if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Section == elf.SHN_UNDEF {
						continue
					}
					for _, d := range []uint64{0, s.Size / 2} {
						abs := bias[path] + s.Value + d
						var m *procmaps.Mapping
						for i := range maps {
							if maps[i].Exec() && maps[i].Path == path && abs >= maps[i].Start && abs < maps[i].End {
								m = &maps[i]
							}
						}
						if m == nil {
							t.Fatalf("%s: %s+%#x at %#x is in no executable mapping", path, s.Name, d, abs)
						}
						mod := symbolizer.Module{ModuleLoad: format.ModuleLoad{Kind: format.ModuleELF, Base: m.Start, Size: m.End - m.Start, FileOffset: m.Offset, Path: path}}
						rel, ok := mod.Relative(abs, src.Segments())
						if !ok || rel != s.Value+d {
							t.Errorf("%s: %s+%#x at %#x (mapped at %#x from %#x): Relative = %#x %v, want %#x", filepath.Base(path), s.Name, d, abs, m.Start, m.Offset, rel, ok, s.Value+d)
							continue
						}
						frames, err := src.Symbolize(rel, nil)
						if err != nil || len(frames) == 0 {
							t.Fatalf("%s: %#x: %v %v", path, rel, frames, err)
						}
						rels = append(rels, rel)
						ours = append(ours, frames[0].Function)
					}
				}
				src.Close()
				if len(rels) < 4 {
					t.Fatalf("%s: %d addresses checked", path, len(rels))
				}
				blocks := llvmBlocks(t, path, rels)
				for i, b := range blocks {
					if theirs, _, _ := strings.Cut(b, "\n"); theirs != ours[i] {
						t.Errorf("%s: %#x: ours %q, llvm-symbolizer %q", filepath.Base(path), rels[i], ours[i], theirs)
					}
				}
				t.Logf("%s: %d addresses agree with llvm-symbolizer", filepath.Base(path), len(rels))
			}
		})
	}
}
