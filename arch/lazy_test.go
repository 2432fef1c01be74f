package arch

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"math/rand"
	"os"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// lazyLibraries are system files with large .eh_frame sections, as a
// whole-host recorder meets them.
var lazyLibraries = []string{
	"/usr/lib/x86_64-linux-gnu/libc.so.6",
	"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
	"/usr/lib/x86_64-linux-gnu/libm.so.6",
	"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
	"/usr/lib/aarch64-linux-gnu/libc.so.6",
}

// TestLazyTableMatchesFull holds a lazy table to the full table of the
// same file: for every row of the full table, its first and last address
// and the addresses around its start, in a shuffled order (a lazy table's
// state depends on what was looked up before), the two tables return the
// same rule. The files: a C fixture and system libraries (indexed by
// .eh_frame_hdr), the same libraries' .eh_frame indexed by a scan, and a
// Go program (.debug_frame only, indexed by a scan).
func TestLazyTableMatchesFull(t *testing.T) {
	files := append([]string{testbuild.CC(t, "gcc", "", []string{"testdata/deep.c"}, "-O2", "-g", "-fomit-frame-pointer"), buildGo(t, "goprog")}, lazyLibraries...)
	tested := 0
	for _, path := range files {
		f, err := elf.Open(path)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		full, err := NewTableELF(f, path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		lazy, err := NewLazyTableELF(f, path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var scanned *Table
		if es := f.Section(".eh_frame"); es != nil {
			d, _ := es.Data()
			var hdrAddr uint64
			if hs := f.Section(".eh_frame_hdr"); hs != nil {
				hdrAddr = hs.Addr
			}
			scanned = newLazyTable(lazy.Arch, path, d, es.Addr, true, nil, hdrAddr, pltStubs(f, lazy.Arch))
		}
		f.Close()
		if ok, _, total := lazy.Lazy(); !ok {
			if full.FDEs > 100 {
				t.Errorf("%s: %d FDEs and no lazy table", path, full.FDEs)
			}
			continue
		} else if total < full.FDEs {
			t.Errorf("%s: the index lists %d FDEs, the full table has %d", path, total, full.FDEs)
		}
		var addrs []uint64
		for i := 0; i < full.Len(); i++ {
			start, _ := full.Row(i)
			addrs = append(addrs, start, start-1, start+1)
			if i+1 < full.Len() {
				next, _ := full.Row(i + 1)
				addrs = append(addrs, next-1)
			}
		}
		rand.New(rand.NewSource(1)).Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
		for _, tab := range []*Table{lazy, scanned} {
			if tab == nil {
				continue
			}
			for _, a := range addrs {
				if got, want := tab.Lookup(a), full.Lookup(a); got != want {
					t.Fatalf("%s: Lookup(%#x): lazy %v, full %v", path, a, got, want)
				}
			}
			_, parsed, total := tab.Lazy()
			t.Logf("%s: %d addresses, %d rows, %d of %d FDEs parsed; full table %d bytes, lazy %d", path, len(addrs), full.Len(), parsed, total, full.Bytes(), tab.Bytes())
		}
		tested++
	}
	if tested < 3 {
		t.Fatalf("only %d files had lazy tables", tested)
	}
}

// TestLazyTableFewFDEs checks that a lookup parses only the FDE it needs.
func TestLazyTableFewFDEs(t *testing.T) {
	const path = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(path)
	if err != nil {
		testbuild.Skip(t, "%v", err)
	}
	defer f.Close()
	lazy, err := NewLazyTableELF(f, path)
	if err != nil {
		t.Fatal(err)
	}
	sym, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range sym {
		if s.Name == "memcpy" || s.Name == "malloc" {
			n++
			if r := lazy.Lookup(s.Value); r.CFA == CFANone {
				t.Errorf("%s at %#x: no rule", s.Name, s.Value)
			}
		}
	}
	ok, parsed, total := lazy.Lazy()
	if !ok || parsed == 0 || parsed > n || total < 1000 {
		t.Fatalf("lazy %v, %d of %d FDEs parsed after %d lookups", ok, parsed, total, n)
	}
}

// lazySeed assembles an .eh_frame of two FDEs and its .eh_frame_hdr.
func lazySeed() (eh, hdr []byte) {
	var e ehAsm
	c := e.cie(-8, AMD64RIP, cfaDefCFA, AMD64RSP, 8, cfaOffset|AMD64RIP, 1)
	f1 := len(e.b)
	e.fde(c, 0x1000, 0x40, cfaAdvanceLoc|1, cfaDefCFAOffset, 16, cfaOffset|AMD64RBP, 2)
	f2 := len(e.b)
	e.fde(c, 0x2000, 0x10, cfaAdvanceLoc|4, cfaDefCFAOffset, 32)
	e.u32(0)
	var ehAddr, hdrAddr int64 = 0x10000, 0x20000
	le := binary.LittleEndian
	hdr = []byte{1, peDatarel | peSdata4, peUdata4, peDatarel | peSdata4}
	hdr = le.AppendUint32(hdr, uint32(int32(ehAddr-hdrAddr)))
	hdr = le.AppendUint32(hdr, 2)
	for _, p := range [][2]int64{{0x1000, int64(f1)}, {0x2000, int64(f2)}} {
		hdr = le.AppendUint32(hdr, uint32(int32(p[0]-hdrAddr)))
		hdr = le.AppendUint32(hdr, uint32(int32(ehAddr+p[1]-hdrAddr)))
	}
	return e.b, hdr
}

// FuzzLazyTable parses arbitrary unwind bytes as a lazy table (flags bit
// 0: .debug_frame, indexed by a scan; bit 1: .eh_frame without its
// header) and looks addresses up in it: no panic, and for the well-formed
// seed, the same rules as the full table (a search table of arbitrary
// bytes need not agree with .eh_frame).
func FuzzLazyTable(f *testing.F) {
	seedEH, seedHdr := lazySeed()
	f.Add(seedEH, seedHdr, uint64(0x1001), uint8(0))
	f.Add(seedEH, seedHdr, uint64(0x2004), uint8(2))
	f.Fuzz(func(t *testing.T, data, hdr []byte, addr uint64, flags uint8) {
		const ehAddr, hdrAddr = 0x10000, 0x20000
		seed := bytes.Equal(data, seedEH) && bytes.Equal(hdr, seedHdr) && flags&1 == 0
		s := Sections{File: "fuzz", Arch: AMD64}
		var lazy *Table
		switch {
		case flags&1 != 0:
			lazy = newLazyTable(AMD64, "fuzz", data, 0, false, nil, 0, nil)
			s.DebugFrame = data
		case flags&2 != 0:
			lazy = newLazyTable(AMD64, "fuzz", data, ehAddr, true, nil, hdrAddr, nil)
			s.EHFrame, s.EHFrameAddr, s.EHFrameHdrAddr = data, ehAddr, hdrAddr
		default:
			lazy = newLazyTable(AMD64, "fuzz", data, ehAddr, true, hdr, hdrAddr, nil)
			s.EHFrame, s.EHFrameAddr, s.EHFrameHdrAddr = data, ehAddr, hdrAddr
		}
		if seed && lazy.Lookup(0x1001).CFA == CFANone {
			t.Fatal("the seed's first FDE has no rule at 0x1001")
		}
		full, _ := NewTable(s)
		for _, a := range []uint64{addr, addr + 1, addr - 1, 0x1000, 0x1001, 0x2004, 0x2010} {
			got := lazy.Lookup(a)
			if seed {
				if want := full.Lookup(a); got != want {
					t.Fatalf("Lookup(%#x): lazy %v, full %v", a, got, want)
				}
			}
		}
		lazy.Bytes()
	})
}

// TestNewLazyTable covers the constructor from section bytes: a lazy table
// from the seed's .eh_frame with and without its header, a full one for
// a small section, and ErrNoUnwindInfo for none.
func TestNewLazyTable(t *testing.T) {
	eh, hdr := lazySeed()
	pad := make([]byte, lazyMinEHFrame) // zero entries after the terminator: never read
	big := append(append([]byte{}, eh...), pad...)
	for _, s := range []Sections{
		{File: "seed", Arch: AMD64, EHFrame: big, EHFrameAddr: 0x10000, EHFrameHdr: hdr, EHFrameHdrAddr: 0x20000},
		{File: "seed", Arch: AMD64, EHFrame: big, EHFrameAddr: 0x10000, EHFrameHdrAddr: 0x20000},
	} {
		tab, err := NewLazyTable(s)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _, total := tab.Lazy(); !ok || total != 2 {
			t.Fatalf("lazy %v with %d FDEs, want a lazy table of 2", ok, total)
		}
		full, _ := NewTable(s)
		for _, a := range []uint64{0xfff, 0x1000, 0x1001, 0x1003, 0x103f, 0x1040, 0x2000, 0x2004, 0x2010} {
			if got, want := tab.Lookup(a), full.Lookup(a); got != want {
				t.Fatalf("Lookup(%#x): lazy %v, full %v", a, got, want)
			}
		}
	}
	small, err := NewLazyTable(Sections{File: "seed", Arch: AMD64, EHFrame: eh, EHFrameAddr: 0x10000, EHFrameHdr: hdr, EHFrameHdrAddr: 0x20000})
	if ok, _, _ := small.Lazy(); err != nil || ok {
		t.Fatalf("a %d-byte .eh_frame: lazy %v, %v; want the full table", len(eh), ok, err)
	}
	if _, err := NewLazyTable(Sections{File: "none", Arch: AMD64}); !errors.Is(err, ErrNoUnwindInfo) {
		t.Fatalf("no sections: %v", err)
	}
}
