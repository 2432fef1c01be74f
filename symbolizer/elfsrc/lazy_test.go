package elfsrc

import (
	"debug/elf"
	"math/rand"
	"reflect"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// TestLazyIndexMatchesWhole checks that a compressed .debug_info and
// .debug_line read only as far as lookups need answer every address, in
// any order, as the whole sections do (glibc's debug file from
// libc6-dbg: 4,000 units, zlib-compressed).
func TestLazyIndexMatchesWhole(t *testing.T) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(libc)
	if err != nil {
		testbuild.Skip(t, "no %s: %v", libc, err)
	}
	id := locate.BuildID(f)
	f.Close()
	res, err := locate.Find(locate.Request{Path: libc, BuildID: id}, nil)
	if err != nil || res.Debug == "" {
		testbuild.Skip(t, "glibc's debug file is not installed (apt-get install libc6-dbg): %v", err)
	}
	addrs := textAddrs(t, libc, 3000)
	rand.New(rand.NewSource(1)).Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	open := func() *Source {
		s, err := Open(libc, &Options{DebugFile: res.Debug})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	lazy, whole := open(), open()
	if lazy.infoR == nil {
		t.Fatal("glibc's compressed .debug_info was read whole at Open")
	}
	if lazy.lineZ == nil {
		t.Fatal("glibc's compressed .debug_line was read whole at Open")
	}
	whole.idxMu.Lock()
	for whole.indexNext() != nil {
	}
	whole.idxMu.Unlock()
	if n := whole.lineZ.ensure(^uint64(0)); n != uint64(len(whole.lineZ.buf)) {
		t.Fatalf("decompressed %d of %d bytes of .debug_line", n, len(whole.lineZ.buf))
	}
	// Half the lookups in a batch, as report does, half one by one.
	lazy.Prefetch(addrs[:len(addrs)/2], 2)
	var a, b []symbolizer.Frame
	for _, addr := range addrs {
		a, _ = lazy.Symbolize(addr, a[:0])
		b, _ = whole.Symbolize(addr, b[:0])
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%#x: on demand %v, whole index %v", addr, a, b)
		}
	}
	if len(lazy.cus) != len(whole.cus) {
		t.Logf("indexed %d of %d units", len(lazy.cus), len(whole.cus))
	}
}

// FuzzParseAbbrev checks that the one-abbreviation reader of the unit
// index reads a table as parseAbbrevs does.
func FuzzParseAbbrev(f *testing.F) {
	ef, err := elf.Open("testdata/fuzz/tiny.elf")
	if err != nil {
		f.Fatal(err)
	}
	abbrev, _ := sectionData(ef, ".debug_abbrev")
	ef.Close()
	for code := uint64(0); code < 8; code++ {
		f.Add(abbrev, uint64(0), code)
	}
	f.Add([]byte{1, 0x11, 1, 3, 8, 0, 0, 1, 0x2e, 0, 0, 0, 0}, uint64(0), uint64(1)) // code 1 defined twice
	f.Fuzz(func(t *testing.T, sec []byte, off, code uint64) {
		all, errAll := parseAbbrevs(sec, off)
		one, errOne := parseAbbrev(sec, off, code)
		if (errAll == nil) != (errOne == nil) {
			t.Fatalf("parseAbbrevs: %v, parseAbbrev: %v", errAll, errOne)
		}
		if errAll != nil {
			return
		}
		if a, b := all.get(code), one.get(code); !reflect.DeepEqual(a, b) {
			t.Fatalf("code %d: parseAbbrevs %+v, parseAbbrev %+v", code, a, b)
		}
	})
}
