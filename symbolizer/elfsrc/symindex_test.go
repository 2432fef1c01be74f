package elfsrc

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// symIndexPaths are the files the index tests read: the fuzz seed ELF
// and, where present, libc (its .dynsym) and its separate debug file
// (a full .symtab). The test binary is linked without a symbol table.
func symIndexPaths(t testing.TB) []string {
	paths := []string{"testdata/fuzz/tiny.elf"}
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
	return paths
}

// TestSymIndexMatchesSymtabNames: an index names every address as
// SymtabNames does (each start, either side of it, the middle and the
// end of each function), and so does the same index read back from its
// bytes.
func TestSymIndexMatchesSymtabNames(t *testing.T) {
	id := []byte{0xde, 0xad, 0xbe, 0xef}
	for _, path := range symIndexPaths(t) {
		x, err := BuildSymIndex(path, id)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if x == nil {
			t.Logf("%s: no function symbols", path)
			continue
		}
		y, err := ParseSymIndex(bytes.Clone(x.Bytes()), id)
		if err != nil {
			t.Fatalf("%s: reading the index back: %v", path, err)
		}
		var addrs []uint64
		le := binary.LittleEndian
		for i := 0; i < x.n; i++ {
			e := x.ents[i*symIndexEnt:]
			start, size := le.Uint64(e), le.Uint64(e[8:])
			addrs = append(addrs, start-1, start, start+1, start+size/2, start+size, start+size+1)
		}
		want, err := SymtabNames(path, addrs)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		named := 0
		for _, a := range addrs {
			if got := x.Name(a); got != want[a] {
				t.Errorf("%s: %#x: index names it %q, SymtabNames %q", path, a, got, want[a])
			} else if got != "" {
				named++
			}
			if got := y.Name(a); got != want[a] {
				t.Errorf("%s: %#x: index read back names it %q, SymtabNames %q", path, a, got, want[a])
			}
		}
		t.Logf("%s: %d entries, %d addresses checked, %d named", path, x.Len(), len(addrs), named)
		if named == 0 {
			t.Errorf("%s: nothing named", path)
		}
	}
}

// TestCachedSymIndex: the first call writes the cache file, the second
// reads it; a corrupt file, or one of another build id, is rebuilt over.
func TestCachedSymIndex(t *testing.T) {
	dir := t.TempDir()
	id := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	paths := symIndexPaths(t)
	path := paths[len(paths)-1]
	a, err := CachedSymIndex(dir, path, id, "file")
	if err != nil || a == nil {
		t.Fatalf("first: %v %v", a, err)
	}
	name := SymIndexFile(dir, id, "file")
	stored, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("no cache file written: %v", err)
	}
	if !bytes.Equal(stored, a.Bytes()) {
		t.Fatal("cache file differs from the index")
	}
	b, err := CachedSymIndex(dir, path, id, "file")
	if err != nil || !bytes.Equal(b.Bytes(), a.Bytes()) {
		t.Fatalf("second: %v", err)
	}
	for _, bad := range [][]byte{
		[]byte("garbage"),
		stored[:len(stored)-1],
		append(bytes.Clone(stored[:symIndexHead]), append([]byte{9, 9, 9, 9, 9, 9, 9, 9}, stored[symIndexHead+len(id):]...)...), // another build id
	} {
		if err := os.WriteFile(name, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := CachedSymIndex(dir, path, id, "file")
		if err != nil || !bytes.Equal(c.Bytes(), a.Bytes()) {
			t.Fatalf("after a bad cache file: %v", err)
		}
		if got, _ := os.ReadFile(name); !bytes.Equal(got, stored) {
			t.Error("a bad cache file was not rebuilt over")
		}
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, ".symidx-*")); len(ents) > 0 {
		t.Errorf("temporary files left: %v", ents)
	}
}

// TestParseSymIndexRejects names what is wrong with a bad index.
func TestParseSymIndexRejects(t *testing.T) {
	id := []byte{7}
	x, err := BuildSymIndex("testdata/fuzz/tiny.elf", id)
	if err != nil || x == nil {
		t.Fatalf("%v %v", x, err)
	}
	good := x.Bytes()
	le := binary.LittleEndian
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := map[string][]byte{
		"magic":     mod(func(b []byte) []byte { b[0] = 'X'; return b }),
		"id length": mod(func(b []byte) []byte { le.PutUint32(b[8:], 65); return b }),
		"entries":   mod(func(b []byte) []byte { le.PutUint32(b[12:], 1<<30); return b }),
		"strings":   mod(func(b []byte) []byte { le.PutUint32(b[16:], 1<<30); return b }),
		"reserved":  mod(func(b []byte) []byte { b[20] = 1; return b }),
		"size":      append(bytes.Clone(good), 0),
		"name":      mod(func(b []byte) []byte { le.PutUint32(b[symIndexHead+len(id)+16:], 1<<20); return b }),
		"build id":  mod(func(b []byte) []byte { b[symIndexHead] = 8; return b }),
	}
	if x.Len() > 1 {
		cases["order"] = mod(func(b []byte) []byte {
			e := b[symIndexHead+len(id):]
			le.PutUint64(e[symIndexEnt:], le.Uint64(e))
			return b
		})
	}
	for what, b := range cases {
		if _, err := ParseSymIndex(b, id); err == nil {
			t.Errorf("%s: accepted", what)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
}

// FuzzParseSymIndex: whatever a cache file holds, parsing and naming
// neither panic nor read outside it.
func FuzzParseSymIndex(f *testing.F) {
	x, err := BuildSymIndex("testdata/fuzz/tiny.elf", []byte{0xab})
	if err != nil || x == nil {
		f.Fatalf("%v %v", x, err)
	}
	f.Add(x.Bytes(), uint64(0x4000b0))
	f.Add([]byte(symIndexMagic), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		x, err := ParseSymIndex(data, []byte{0xab})
		if err != nil {
			return
		}
		for _, a := range []uint64{addr, addr + 1, 0, ^uint64(0)} {
			x.Name(a)
		}
	})
}
