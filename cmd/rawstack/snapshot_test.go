package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform/snapshot"
	"github.com/rawstack/rawstack/symbolizer"
)

// fakeSnapshot is a snapshot of a small C binary (not run): one thread
// whose frames are inner's entry and a return address inside outer, then
// a pc in no module.
func fakeSnapshot(t *testing.T) *snapshot.Snapshot {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skipf("gcc not installed: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "snapshot_syms")
	if out, err := exec.Command("gcc", "-O2", "-o", exe, filepath.Join("testdata", "snapshot_syms.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]uint64{}
	for _, s := range syms {
		addr[s.Name] = s.Value
	}
	// Mapped with a load bias of 0x10000 (the addresses are link-time).
	const bias = 0x10000
	return &snapshot.Snapshot{
		Pid: 42, Name: "fake", Arch: arch.AMD64,
		Modules: []snapshot.Module{{Start: bias, End: bias + 1<<24, Path: exe, File: exe, Bias: bias, HaveBias: true, Kind: format.ModuleELF, BuildID: []byte{1, 2, 3}}},
		Threads: []snapshot.Thread{
			{Tid: 42, Name: "main", PCs: []uint64{bias + addr["inner"], bias + addr["outer"] + 5, 0x10}, Stop: arch.StopBadMemory},
			{Tid: 43, Err: io.ErrUnexpectedEOF},
		},
	}
}

func TestSnapshotPrint(t *testing.T) {
	snap := fakeSnapshot(t)
	var out bytes.Buffer
	if err := printSnapshot(&out, snap, symtabNames); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"PID 42 - process\nTID 42:\n#0  0x",
		" inner\n#1  0x",
		" outer\n#2  0x0000000000000010\n",
		"    (unwind stopped: bad memory)\nTID 43:\n  (unexpected EOF)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	out.Reset()
	printSnapshot(&out, snap, noNames)
	if base := filepath.Base(snap.Modules[0].Path); !strings.Contains(out.String(), " "+base+"+0x") {
		t.Errorf("--no-symbols output lacks module+offset:\n%s", out.String())
	}
}

func TestSnapshotStream(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snap.rawstack")
	if err := writeSnapshot(fakeSnapshot(t), path); err != nil {
		t.Fatal(err)
	}
	kinds := countKinds(t, path)
	want := map[format.Kind]int{format.KindProcess: 1, format.KindThreadStart: 2, format.KindThreadName: 1, format.KindModuleLoad: 1, format.KindStack: 1, format.KindSample: 1}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
}

func TestSnapshotUsage(t *testing.T) {
	for _, args := range [][]string{{"snapshot"}, {"snapshot", "-p", "1", "--core", "x"}, {"snapshot", "-p", "1", "extra"}} {
		var out, errb bytes.Buffer
		if rc := run(args, &out, &errb); rc != 2 {
			t.Errorf("%q: rc %d, want 2 (%s)", args, rc, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if rc := run([]string{"snapshot", "--core", "/nonexistent/core.1"}, &out, &errb); rc != 1 || !strings.Contains(errb.String(), "/nonexistent/core.1") {
		t.Errorf("missing core: rc %d, stderr %q", rc, errb.String())
	}
}

// appendFrameHead must print exactly what the fmt verbs it replaces do.
func TestAppendFrameHead(t *testing.T) {
	for _, i := range []int{0, 1, 9, 10, 99, 100, 511} {
		for _, pc := range []uint64{0, 1, 0x7f6014587f16, 0xffffffffffffffff, 0x8000000000000000} {
			got := string(appendFrameHead([]byte("x"), i, pc))
			if want := fmt.Sprintf("x#%-2d 0x%016x", i, pc); got != want {
				t.Errorf("appendFrameHead(%d, %#x) = %q, want %q", i, pc, got, want)
			}
		}
	}
}

// TestNamesFromSymtab checks namesFromSymtab, which walks a symbol table
// twice for the wanted addresses alone, against the plain way: every
// function symbol sorted by address, one per address (the largest, then
// the best ranked), the nearest at or below an address naming it if it
// holds it. It uses the test binary (a Go .symtab) and, where present,
// libc and its separate debug file.
func TestNamesFromSymtab(t *testing.T) {
	paths := []string{os.Args[0]}
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"} {
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
			if f, err := elf.Open(p); err == nil {
				if dbg := debugFileFor(fileBuildID(f)); dbg != "" {
					paths = append(paths, dbg)
				}
				f.Close()
			}
			break
		}
	}
	for _, path := range paths {
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		syms, err := f.Symbols()
		if err != nil || len(syms) == 0 {
			syms, err = f.DynamicSymbols()
		}
		if err != nil {
			f.Close()
			t.Logf("%s: no symbols to check: %v", path, err) // a binary built with -ldflags=-s
			continue
		}
		type sym struct {
			addr, size uint64
			name       string
			rank       int
		}
		var ref []sym
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF || int(s.Section) >= len(f.Sections) || s.Value == 0 {
				continue
			}
			switch elf.ST_TYPE(s.Info) {
			case elf.STT_FUNC, elf.STT_GNU_IFUNC:
			case elf.STT_NOTYPE:
				if f.Sections[s.Section].Flags&elf.SHF_EXECINSTR == 0 || s.Size == 0 {
					continue
				}
			default:
				continue
			}
			ref = append(ref, sym{s.Value, s.Size, s.Name, symRank(s.Name, s.Info)})
		}
		f.Close()
		sort.SliceStable(ref, func(i, j int) bool {
			a, b := ref[i], ref[j]
			if a.addr != b.addr {
				return a.addr < b.addr
			}
			if a.size != b.size {
				return a.size > b.size
			}
			return a.rank > b.rank
		})
		// One symbol per address, the first in that order; an address
		// whose best two aliases tie in size and rank is not checked:
		// either names it.
		var best []sym
		tie := map[uint64]bool{}
		for i, s := range ref {
			if i > 0 && s.addr == ref[i-1].addr {
				continue
			}
			if i+1 < len(ref) && ref[i+1].addr == s.addr && ref[i+1].size == s.size && ref[i+1].rank == s.rank {
				tie[s.addr] = true
			}
			best = append(best, s)
		}
		var addrs []uint64
		for i, s := range best {
			if i%7 == 0 || len(best) < 2000 {
				addrs = append(addrs, s.addr-1, s.addr, s.addr+1, s.addr+s.size/2, s.addr+s.size, s.addr+s.size+1)
			}
		}
		got, err := namesFromSymtab(path, addrs)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		checked := 0
		for _, a := range addrs {
			i := sort.Search(len(best), func(i int) bool { return best[i].addr > a })
			want := ""
			if i > 0 {
				s := best[i-1]
				if tie[s.addr] {
					continue
				}
				if a < s.addr+s.size || s.size == 0 {
					want = symbolizer.Demangle(s.name)
				}
			}
			checked++
			if g, _ := got.name(a); g != want {
				t.Errorf("%s: %#x named %q, want %q", path, a, g, want)
			}
		}
		t.Logf("%s: %d addresses checked", path, checked)
		if checked == 0 {
			t.Errorf("%s: no address checked", path)
		}
	}
}

func fileBuildID(f *elf.File) []byte {
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		return nil
	}
	b, err := s.Data()
	if err != nil || len(b) < 16 {
		return nil
	}
	return b[16:]
}
