package elfsrc

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/internal/fixture"
)

// testdata/fuzz/tiny.elf is testdata/fuzz/tiny.c built with
//
//	gcc -O2 -g -gdwarf-5 -nostdlib -static -fno-asynchronous-unwind-tables \
//	    -Wl,--build-id=none -Wl,-N -o tiny tiny.c
//	objcopy --remove-section=.comment tiny tiny.elf
//
// 2 KiB with DWARF 5 line tables and an inlined call.
func FuzzNewFile(f *testing.F) {
	seed, err := os.ReadFile("testdata/fuzz/tiny.elf")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, uint64(0x4000b0))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		s, err := NewFile(bytes.NewReader(data), "fuzz")
		if err != nil {
			return
		}
		var fr []symbolizer.Frame
		for _, a := range []uint64{addr, addr + 1, addr + 7} {
			fr, _ = s.Symbolize(a, fr[:0])
		}
	})
}

func TestTinySeed(t *testing.T) {
	s, err := Open("testdata/fuzz/tiny.elf", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := s.f
	var start uint64
	syms, _ := f.Symbols()
	for _, sy := range syms {
		if sy.Name == "f" {
			start = sy.Value
		}
	}
	fr, err := s.Symbolize(start, nil)
	if err != nil || len(fr) != 2 || fr[0].Function != "sq" || fr[1].Function != "f" || fr[0].Line != 1 || fr[1].Line != 2 {
		t.Errorf("f's first instruction: %+v %v; want sq (line 1) inlined in f (line 2)", fr, err)
	}
}

// TestConcurrentSymbolize checks that a Source answers the same from
// several goroutines at once as from one (run it with -race).
func TestConcurrentSymbolize(t *testing.T) {
	var c corpus
	for _, x := range corpora() {
		if x.name == "g++-O2" { // STL code, many inlined frames
			c = x
		}
	}
	dir := fixture.Build(t, c.srcs, c.tools, c.script)
	bin := filepath.Join(dir, c.bin)
	addrs := textAddrs(t, bin, 2000)
	want := make([]string, len(addrs))
	{
		s, err := Open(bin, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range addrs {
			fr, _ := s.Symbolize(a, nil)
			want[i] = string(symbolizer.AppendLLVM(nil, fr))
		}
		s.Close()
	}
	s, err := Open(bin, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			if g == 0 {
				s.Prefetch(addrs, 2)
			}
			for k := range addrs {
				i := (k*7 + g*131) % len(addrs)
				fr, _ := s.Symbolize(addrs[i], nil)
				if got := string(symbolizer.AppendLLVM(nil, fr)); got != want[i] {
					errs <- fmt.Sprintf("goroutine %d, %#x:\n%s\nwant:\n%s", g, addrs[i], got, want[i])
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// FuzzDIEReader feeds the DIE reader raw .debug_info and .debug_abbrev
// bytes directly (the ELF fuzz test mostly mutates headers), seeded with
// the sections of testdata/fuzz/tiny.elf.
func FuzzDIEReader(f *testing.F) {
	ef, err := elf.Open("testdata/fuzz/tiny.elf")
	if err != nil {
		f.Fatal(err)
	}
	info, _ := sectionData(ef, ".debug_info")
	abbrev, _ := sectionData(ef, ".debug_abbrev")
	str, _ := sectionData(ef, ".debug_str")
	ef.Close()
	f.Add(info, abbrev, str)
	f.Fuzz(func(t *testing.T, info, abbrev, str []byte) {
		s := &Source{hasDWARF: true}
		s.secs = dwarfSecs{info: info, abbrev: abbrev, str: str, lineStr: str, order: binary.LittleEndian}
		if err := s.indexUnits(info, binary.LittleEndian); err != nil {
			return
		}
		for _, u := range s.cus {
			tree, _ := buildTree(&s.secs, &u.hdr)
			if tree == nil {
				continue
			}
			var chain [64]int32
			for _, r := range tree.top {
				n := tree.chain(r.lo, chain[:])
				for _, c := range chain[:n] {
					tree.name(s, tree.nodes[c].off)
				}
			}
		}
	})
}
