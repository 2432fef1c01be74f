package arch

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/procmaps"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// buildLLDChain builds testdata/lldchain (liblldchain.so and the
// executable lldchain beside it) with clang and the linker ld ("lld" or
// "bfd", GNU ld), -O2 -fomit-frame-pointer, and returns the executable.
func buildLLDChain(t testing.TB, ld string) string {
	t.Helper()
	testbuild.NeedAll(t, "the lldchain fixture is built with clang and linked with lld and GNU ld", "clang", "ld.lld", "ld.bfd")
	return testbuild.Build(t, testbuild.Cmd{
		Tool: "sh",
		Args: []string{"-ec", "clang -O2 -g -fomit-frame-pointer -fPIC -shared -fuse-ld=" + ld + " -o liblldchain.so {in0}/lib.c\n" +
			"clang -O2 -g -fomit-frame-pointer -fuse-ld=" + ld + " -o lldchain {in0}/main.c -L. -llldchain -Wl,-rpath,'$ORIGIN'"},
		Inputs: []string{"testdata/lldchain"},
		Out:    "lldchain",
		Key:    "clang " + ld,
	})
}

// TestLoadBiasLLD runs the lldchain fixture linked with lld and with GNU
// ld and checks that LoadBias, given each executable mapping of the
// executable and of liblldchain.so in /proc/PID/maps, returns the load
// bias the dynamic loader itself reports (dl_iterate_phdr). The lld
// outputs must have the layout that used to fool it: a code segment with
// p_vaddr != p_offset whose first file page is also the read-only
// segment's.
func TestLoadBiasLLD(t *testing.T) {
	if _, err := os.Stat("/proc/self/maps"); err != nil {
		testbuild.Skip(t, "no /proc: %v", err)
	}
	for _, ld := range []string{"lld", "bfd"} {
		t.Run(ld, func(t *testing.T) {
			exe := buildLLDChain(t, ld)
			lib := filepath.Join(filepath.Dir(exe), "liblldchain.so")
			if ld == "lld" {
				for _, p := range []string{exe, lib} {
					if !sharesCodePage(t, p) {
						t.Fatalf("%s: no code segment with p_vaddr != p_offset sharing its first page with another segment: not the layout under test", p)
					}
				}
			}
			cmd := exec.Command(exe, "-1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			want := map[string]uint64{} // path -> bias
			sc := bufio.NewScanner(out)
			for sc.Scan() && sc.Text() != "ready" {
				f := strings.Fields(sc.Text())
				if len(f) != 3 || f[0] != "bias" {
					continue
				}
				b, err := strconv.ParseUint(f[2], 16, 64)
				if err != nil {
					t.Fatalf("fixture line %q", sc.Text())
				}
				if f[1] == "-" {
					f[1] = exe
				}
				want[f[1]] = b
			}
			data, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/maps")
			if err != nil {
				t.Fatal(err)
			}
			maps, err := procmaps.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			checked := map[string]int{}
			for _, m := range maps {
				if !m.Exec() || (m.Path != exe && m.Path != lib) {
					continue
				}
				f, err := elf.Open(m.Path)
				if err != nil {
					t.Fatal(err)
				}
				got, err := LoadBias(f, m.Start, m.Offset)
				f.Close()
				if err != nil {
					t.Fatalf("%s mapped at %#x from %#x: %v", m.Path, m.Start, m.Offset, err)
				}
				w, ok := want[m.Path]
				if !ok {
					t.Fatalf("the fixture printed no bias for %s (it printed %v)", m.Path, want)
				}
				if got != w {
					t.Errorf("%s: code mapped at %#x from offset %#x: LoadBias = %#x, the loader's bias is %#x", filepath.Base(m.Path), m.Start, m.Offset, got, w)
				}
				checked[m.Path]++
			}
			if checked[exe] == 0 || checked[lib] == 0 {
				t.Fatalf("executable mappings checked: %v; want the executable's and the library's", checked)
			}
		})
	}
}

// sharesCodePage reports whether path has an executable PT_LOAD segment
// with p_vaddr != p_offset whose first 4 KiB file page is also the first
// page of another PT_LOAD segment.
func sharesCodePage(t testing.TB, path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, x := range f.Progs {
		if x.Type != elf.PT_LOAD || x.Flags&elf.PF_X == 0 || x.Vaddr == x.Off {
			continue
		}
		for _, p := range f.Progs {
			if p != x && p.Type == elf.PT_LOAD && p.Off&^0xfff == x.Off&^0xfff {
				return true
			}
		}
	}
	return false
}
