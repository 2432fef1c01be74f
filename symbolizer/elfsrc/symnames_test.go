package elfsrc

import (
	"debug/elf"
	"os"
	"sort"
	"testing"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// TestSymtabNames checks SymtabNames, which walks a symbol table
// twice for the wanted addresses alone, against the plain way: every
// function symbol sorted by address, one per address (the largest, then
// the best ranked), the nearest at or below an address naming it if it
// holds it. It uses the test binary (a Go .symtab) and, where present,
// libc and its separate debug file.
func TestSymtabNames(t *testing.T) {
	paths := []string{os.Args[0]}
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"} {
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
			if f, err := elf.Open(p); err == nil {
				if dbg := DebugFile(p, locate.BuildID(f), &symbolizer.Options{NoDebuginfod: true}); dbg != "" {
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
		got, err := SymtabNames(path, addrs)
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
			if g := got[a]; g != want {
				t.Errorf("%s: %#x named %q, want %q", path, a, g, want)
			}
		}
		t.Logf("%s: %d addresses checked", path, checked)
		if checked == 0 {
			t.Errorf("%s: no address checked", path)
		}
	}
}
