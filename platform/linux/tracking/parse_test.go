package tracking

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// buildFixture compiles a testdata C source with cc, cached by the shared
// fixture builder.
func buildFixture(t testing.TB, src string, flags ...string) string {
	t.Helper()
	return testbuild.Build(t, testbuild.Cmd{
		Tool:   "cc",
		Args:   append([]string{"-o", "{dir}/fixture", "{in0}"}, flags...),
		Inputs: []string{filepath.Join("testdata", src)},
		Out:    "fixture",
	})
}

// gnuBuildID reads the build id with debug/elf, as an oracle.
func gnuBuildID(t testing.TB, path string) []byte {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		return nil
	}
	d, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	namesz := binary.LittleEndian.Uint32(d)
	return d[12+(namesz+3)&^3:]
}

func TestReadBuildIDs(t *testing.T) {
	for _, id := range []string{"0123456789abcdef0123456789abcdef01234567", "sha1", "md5"} {
		bin := buildFixture(t, "hello.c", "-Wl,--build-id="+map[bool]string{true: "0x" + id, false: id}[len(id) == 40])
		f, err := os.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := readBuildIDs(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := gnuBuildID(t, bin); len(want) == 0 || !bytes.Equal(ids.BuildID, want) {
			t.Errorf("--build-id=%s: got %x, want %x", id, ids.BuildID, want)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids, err := readBuildIDs(f)
	if err != nil {
		t.Fatal(err)
	}
	if ids.GoBuildID == "" {
		t.Errorf("no Go build id in the test binary %s", exe)
	}
	if _, err := readBuildIDs(bytes.NewReader([]byte("#!/bin/sh\necho hello, this is not ELF at all......................"))); !errors.Is(err, ErrNotELF) {
		t.Errorf("shell script: err = %v, want ErrNotELF", err)
	}
}

func FuzzReadBuildIDs(f *testing.F) {
	if exe, err := os.Executable(); err == nil {
		if b, err := os.ReadFile(exe); err == nil && len(b) > 8192 {
			f.Add(b[:8192])
		}
	}
	if b, err := os.ReadFile("/bin/true"); err == nil && len(b) > 4096 {
		f.Add(b[:4096])
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := readBuildIDs(bytes.NewReader(b))
		if err == nil && len(ids.BuildID) > maxDescBytes {
			t.Fatalf("build id of %d bytes", len(ids.BuildID))
		}
	})
}

// mmap2Record builds a PERF_RECORD_MMAP2 with a sample_id trailer.
func mmap2Record(pid, tid uint32, addr, size, pgoff uint64, prot uint32, name string) []byte {
	le := binary.LittleEndian
	fn := append([]byte(name), 0)
	for len(fn)%8 != 0 {
		fn = append(fn, 0)
	}
	n := 8 + 64 + len(fn) + sampleIDSize
	b := make([]byte, n)
	le.PutUint32(b, recMmap2)
	le.PutUint16(b[6:], uint16(n))
	p := b[8:]
	le.PutUint32(p, pid)
	le.PutUint32(p[4:], tid)
	le.PutUint64(p[8:], addr)
	le.PutUint64(p[16:], size)
	le.PutUint64(p[24:], pgoff)
	le.PutUint32(p[32:], 0xfe)
	le.PutUint32(p[36:], 1)
	le.PutUint64(p[40:], 77)
	le.PutUint32(p[56:], prot)
	copy(p[64:], fn)
	id := b[n-sampleIDSize:]
	le.PutUint32(id, pid)
	le.PutUint32(id[4:], tid)
	le.PutUint64(id[8:], 123456789)
	le.PutUint32(id[16:], 1)
	return b
}

// sampleRecord builds a PERF_RECORD_SAMPLE with the given raw callchain.
func sampleRecord(pid, tid uint32, chain ...uint64) []byte {
	le := binary.LittleEndian
	n := 8 + 48 + 8*len(chain)
	b := make([]byte, n)
	le.PutUint32(b, recSample)
	le.PutUint16(b[4:], 2)
	le.PutUint16(b[6:], uint16(n))
	p := b[8:]
	if len(chain) > 0 {
		le.PutUint64(p, chain[len(chain)-1])
	}
	le.PutUint32(p[8:], pid)
	le.PutUint32(p[12:], tid)
	le.PutUint64(p[16:], 42)
	le.PutUint32(p[24:], 1)
	le.PutUint64(p[32:], 1000)
	le.PutUint64(p[40:], uint64(len(chain)))
	for i, pc := range chain {
		le.PutUint64(p[48+8*i:], pc)
	}
	return b
}

func TestDecodeRecord(t *testing.T) {
	r := record{PCs: make([]uint64, 0, 16)}
	if err := decodeRecord(mmap2Record(7, 8, 0x1000, 0x2000, 0x3000, 5, "/lib/x.so"), &r); err != nil {
		t.Fatal(err)
	}
	if r.Type != recMmap2 || r.Pid != 7 || r.Tid != 8 || r.Addr != 0x1000 || r.Len != 0x2000 || r.Pgoff != 0x3000 || r.Prot != 5 || string(r.Filename) != "/lib/x.so" || r.Ino != 77 || r.Time != 123456789 {
		t.Errorf("mmap2 decoded as %+v", r)
	}
	err := decodeRecord(sampleRecord(7, 9, perfContextKern, 0xffffffff81000010, 0xffffffff81000020, perfContextUser, 0x401000, 0x402000), &r)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Kernel || len(r.PCs) != 4 || r.PCs[0] != 0xffffffff81000010 || r.PCs[3] != 0x402000 || r.Period != 1000 || r.Tid != 9 {
		t.Errorf("sample decoded as kernel=%v pcs=%x %+v", r.Kernel, r.PCs, r)
	}
	if got := recordTime(sampleRecord(7, 9, 0x401000)); got != 42 {
		t.Errorf("sample time %d, want 42", got)
	}
	if got := recordTime(mmap2Record(7, 8, 0x1000, 0x2000, 0x3000, 5, "/lib/x.so")); got != 123456789 {
		t.Errorf("mmap2 time %d, want 123456789", got)
	}
	bad := sampleRecord(1, 1, 0x401000)
	binary.LittleEndian.PutUint64(bad[8+40:], 1<<40) // callchain longer than the record
	if err := decodeRecord(bad, &r); err == nil {
		t.Error("oversized callchain accepted")
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(mmap2Record(7, 8, 0x1000, 0x2000, 0x3000, 5, "/lib/x.so"))
	f.Add(sampleRecord(7, 9, perfContextKern, 0xffffffff81000010, perfContextUser, 0x401000, 0x402000))
	f.Add(sampleRecord(7, 9))
	r := record{PCs: make([]uint64, 0, maxCallchain)}
	f.Fuzz(func(t *testing.T, b []byte) {
		recordTime(b)
		if err := decodeRecord(b, &r); err != nil {
			return
		}
		if len(r.PCs) > maxCallchain+1 || len(r.Filename) > maxFilenameBytes {
			t.Fatalf("decoded %d pcs, %d-byte file name", len(r.PCs), len(r.Filename))
		}
	})
}
