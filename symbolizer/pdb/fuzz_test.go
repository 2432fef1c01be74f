package pdb

import (
	"bytes"
	"encoding/binary"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
)

var update = flag.Bool("update", false, "rebuild testdata/tiny.pdb from testdata/tiny.c")

// writeMSF packs streams into an MSF 7.00 file with the given block size:
// superblock, free block map (blocks 1 and 2), stream data, directory,
// block map.
func writeMSF(streams [][]byte, bs int) []byte {
	var blocks [][]byte
	alloc := func(p []byte) []uint32 {
		var ids []uint32
		for len(p) > 0 {
			n := min(bs, len(p))
			b := make([]byte, bs)
			copy(b, p[:n])
			ids = append(ids, uint32(len(blocks)))
			blocks = append(blocks, b)
			p = p[n:]
		}
		return ids
	}
	blocks = append(blocks, make([]byte, bs), make([]byte, bs), make([]byte, bs)) // superblock, FPM1, FPM2
	var dir []byte
	dir = binary.LittleEndian.AppendUint32(dir, uint32(len(streams)))
	for _, s := range streams {
		dir = binary.LittleEndian.AppendUint32(dir, uint32(len(s)))
	}
	for _, s := range streams {
		for _, id := range alloc(s) {
			dir = binary.LittleEndian.AppendUint32(dir, id)
		}
	}
	dirBlocks := alloc(dir)
	var bm []byte
	for _, id := range dirBlocks {
		bm = binary.LittleEndian.AppendUint32(bm, id)
	}
	bmBlock := alloc(bm)[0]
	sb := blocks[0]
	copy(sb, msfMagic)
	le := binary.LittleEndian
	le.PutUint32(sb[32:], uint32(bs))
	le.PutUint32(sb[36:], 1)
	le.PutUint32(sb[40:], uint32(len(blocks)))
	le.PutUint32(sb[44:], uint32(len(dir)))
	le.PutUint32(sb[52:], bmBlock)
	return bytes.Join(blocks, nil)
}

// streamsOf reads every stream of f.
func streamsOf(t testing.TB, f *File) [][]byte {
	var out [][]byte
	for i := 0; i < f.msf.numStreams(); i++ {
		b, err := f.msf.stream(i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestWriteTinySeed rebuilds testdata/tiny.pdb with -update; without it,
// it checks that repacking the seed reproduces it byte for byte (a
// round trip of the MSF reader and the test's writer).
func TestWriteTinySeed(t *testing.T) {
	if *update {
		testbuild.NeedAll(t, "cannot build or check PDB fixtures", "clang", "lld-link")
		dir := t.TempDir()
		src, _ := filepath.Abs("testdata/tiny.c")
		for _, c := range [][]string{
			{"clang", "--target=x86_64-pc-windows-msvc", "-O2", "-g", "-gcodeview", "-c", src, "-o", "tiny.obj"},
			{"lld-link", "/dll", "/noentry", "/nodefaultlib", "/debug", "/pdb:tiny.pdb", "tiny.obj", "/out:tiny.dll"},
		} {
			cmd := exec.Command(c[0], c[1:]...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", c, err, out)
			}
		}
		f, err := Open(filepath.Join(dir, "tiny.pdb"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := os.WriteFile("testdata/tiny.pdb", writeMSF(streamsOf(t, f), 512), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seed, err := os.ReadFile("testdata/tiny.pdb")
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFile(bytes.NewReader(seed), "tiny.pdb", int64(len(seed)))
	if err != nil {
		t.Fatal(err)
	}
	if again := writeMSF(streamsOf(t, f), 512); !bytes.Equal(again, seed) {
		t.Errorf("repacked seed differs (%d vs %d bytes)", len(again), len(seed))
	}
	// The seed must reach the interesting parsers: a procedure with an
	// inlined call and a line table.
	inlined := false
	for rva := uint64(0x1000); rva < 0x1100; rva++ {
		fr, err := f.Symbolize(rva, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(fr) == 2 && fr[0].Function == "sq" && fr[1].Function == "f" && fr[1].Line >= 10 {
			inlined = true
		}
	}
	if !inlined {
		t.Error("no address of the seed symbolizes to sq inlined into f")
	}
}

// FuzzNewFile parses mutated PDBs and symbolizes addresses in them. The
// seed is testdata/tiny.pdb.
func FuzzNewFile(f *testing.F) {
	seed, err := os.ReadFile("testdata/tiny.pdb")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := NewFile(bytes.NewReader(b), "fuzz.pdb", int64(len(b)))
		if err != nil {
			return
		}
		var fr []symbolizer.Frame
		for rva := uint64(0x1000); rva < 0x1080; rva += 3 {
			fr, _ = p.Symbolize(rva, fr[:0])
		}
		for i := range p.Modules {
			p.module(i)
		}
		p.inlineeName(0x1000)
		p.types(streamTPI)
	})
}
