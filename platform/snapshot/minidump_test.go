package snapshot

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/arch/winunwind"
	"github.com/rawstack/rawstack/internal/testbuild"
)

func sampleMinidump() *MinidumpData {
	ctx := func(rip, rsp uint64) []byte {
		var c winunwind.Context
		c.Regs.R[arch.AMD64RIP], c.Regs.R[arch.AMD64RSP], c.Regs.R[arch.AMD64RBP] = rip, rsp, rsp+0x40
		b := make([]byte, winunwind.ContextSize)
		winunwind.EncodeContext(&c, b)
		return b
	}
	stack := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i)
		}
		return b
	}
	return &MinidumpData{
		Arch: mdArchAMD64, Pid: 4242, Time: 1700000000,
		Threads: []MinidumpThreadData{
			{Tid: 100, Teb: 0x7ff000, Name: "main", Context: ctx(0x140001234, 0x10000), Stack: MinidumpMemory{0x10000, stack(0x300, 1)}},
			{Tid: 104, Teb: 0x7fe000, Context: ctx(0x180002000, 0x20000), Stack: MinidumpMemory{0x20000, stack(0x100, 7)}},
		},
		Modules: []MinidumpModule{
			{Base: 0x140000000, Size: 0x1f000, TimeDateStamp: 0x5f000001, Name: `C:\prog\chain.exe`,
				HasCodeView: true, PDBGUID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, PDBAge: 3, PDBPath: `C:\prog\chain.pdb`},
			{Base: 0x180000000, Size: 0x1b000, TimeDateStamp: 0x5f000002, Name: `C:\prog\spin.dll`},
		},
		Memory: []MinidumpMemory{{0x140000000, stack(64, 'M')}},
	}
}

// TestMinidumpRoundTrip writes a minidump and reads it back.
func TestMinidumpRoundTrip(t *testing.T) {
	in := sampleMinidump()
	var buf bytes.Buffer
	if err := WriteMinidump(&buf, in); err != nil {
		t.Fatal(err)
	}
	d, err := NewMinidump(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "rt.dmp")
	if err != nil {
		t.Fatal(err)
	}
	if d.Arch != in.Arch || d.Pid != int(in.Pid) || d.Time != in.Time || len(d.Threads) != 2 || len(d.Modules) != 2 {
		t.Fatalf("read back %+v", d)
	}
	for i, want := range in.Threads {
		got := d.Threads[i]
		if got.Tid != want.Tid || got.Teb != want.Teb || got.Name != want.Name || !bytes.Equal(got.Context, want.Context) ||
			got.StackStart != want.Stack.Start || got.StackSize != uint64(len(want.Stack.Data)) {
			t.Errorf("thread %d: %+v", i, got)
		}
		p := make([]byte, len(want.Stack.Data))
		if err := d.ReadMemory(want.Stack.Start, p); err != nil || !bytes.Equal(p, want.Stack.Data) {
			t.Errorf("thread %d stack: %v", want.Tid, err)
		}
	}
	for i, want := range in.Modules {
		got := d.Modules[i]
		got.CodeView = nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("module %d: %+v, want %+v", i, got, want)
		}
	}
	p := make([]byte, 64)
	if err := d.ReadMemory(0x140000000, p); err != nil || p[0] != 'M' {
		t.Errorf("extra memory: %v %q", err, p[:4])
	}
	if err := d.ReadMemory(0x10000+0x2f0, make([]byte, 32)); err == nil {
		t.Error("a read past a stack's end succeeded")
	}
}

// TestMinidumpObj2yaml checks what WriteMinidump writes with an
// independent reader: LLVM's obj2yaml parses minidumps stream by stream.
func TestMinidumpObj2yaml(t *testing.T) {
	tool := ""
	for _, n := range []string{"obj2yaml-19", "obj2yaml"} {
		if p, err := exec.LookPath(n); err == nil {
			tool = p
			break
		}
	}
	if tool == "" {
		testbuild.Skip(t, "obj2yaml not installed (llvm): the independent minidump reader")
	}
	var buf bytes.Buffer
	if err := WriteMinidump(&buf, sampleMinidump()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "w.dmp")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, path).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", tool, path, err, out)
	}
	y := string(out)
	for _, want := range []string{"--- !minidump", "Type:            ThreadList", "Type:            ModuleList",
		"Type:            MemoryList", "Type:            SystemInfo", "Processor Arch:  AMD64",
		"Thread Id:       0x64", "Thread Id:       0x68", `Module Name:     'C:\prog\chain.exe'`,
		"Base of Image:   0x140000000", "CodeView Record: 5253445301020304", "Start of Memory Range: 0x20000"} {
		if !strings.Contains(y, want) {
			t.Errorf("obj2yaml output lacks %q:\n%s", want, y)
			break
		}
	}
}

// FuzzMinidump feeds the reader arbitrary bytes, seeded with a dump
// WriteMinidump wrote: it must fail cleanly or give a dump whose every
// read stays within the file. Counts are bounded by the file's size, the
// memory ranges lie in the file, and reading the dump's memory reads only
// the bytes of the range that holds the address, and returns them.
func FuzzMinidump(f *testing.F) {
	var buf bytes.Buffer
	WriteMinidump(&buf, sampleMinidump())
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &readRecorder{b: b}
		d, err := NewMinidump(r, int64(len(b)), "fuzz.dmp")
		r.check(t, "parsing", 0, int64(len(b)))
		if err != nil {
			return
		}
		if len(d.Threads)*mdThreadSize > len(b) || len(d.Modules)*mdModuleSize > len(b) || len(d.Memory)*mdMemDescSize > len(b) {
			t.Fatalf("%d threads, %d modules, %d memory ranges from %d bytes", len(d.Threads), len(d.Modules), len(d.Memory), len(b))
		}
		for _, m := range d.Memory {
			if m.Off < 0 || uint64(m.Off) > uint64(len(b)) || m.Size > uint64(len(b))-uint64(m.Off) {
				t.Fatalf("memory range %#x+%d at file offset %#x is not in the %d-byte file", m.Start, m.Size, m.Off, len(b))
			}
		}
		// Read at each range's first and last byte and across its end.
		var addrs []uint64
		for _, m := range d.Memory {
			addrs = append(addrs, m.Start, m.Start+m.Size-1, m.Start+m.Size-3)
		}
		for _, th := range d.Threads {
			addrs = append(addrs, th.StackStart)
		}
		p := make([]byte, 8)
		for _, a := range addrs {
			r.reads = r.reads[:0]
			if err := d.ReadMemory(a, p); err != nil {
				continue
			}
			// Byte by byte: a range holds a+i, and the file byte it
			// maps to is the one read (ranges may overlap).
			for i := range p {
				if !holds(d.Memory, b, a+uint64(i), p[i]) {
					t.Fatalf("ReadMemory(%#x) gave byte %d %#x, which no range maps %#x to", a, i, p[i], a+uint64(i))
				}
			}
			for _, rd := range r.reads {
				in := false
				for _, m := range d.Memory {
					in = in || rd[0] >= m.Off && rd[0]+rd[1] <= m.Off+int64(m.Size)
				}
				if !in {
					t.Fatalf("ReadMemory(%#x) read %d bytes at file offset %#x, outside every memory range", a, rd[1], rd[0])
				}
			}
		}
		r.reads = r.reads[:0]
		d.Snapshot(nil)
		r.check(t, "snapshot", 0, int64(len(b)))
	})
}

// holds reports whether a range of rs holds addr and maps it to a file
// byte (of b) equal to v.
func holds(rs []MinidumpRange, b []byte, addr uint64, v byte) bool {
	for _, m := range rs {
		if addr >= m.Start && addr-m.Start < m.Size && b[m.Off+int64(addr-m.Start)] == v {
			return true
		}
	}
	return false
}

// readRecorder is an io.ReaderAt over b that records every read.
type readRecorder struct {
	b     []byte
	reads [][2]int64 // offset, length
}

func (r *readRecorder) ReadAt(p []byte, off int64) (int, error) {
	r.reads = append(r.reads, [2]int64{off, int64(len(p))})
	return bytes.NewReader(r.b).ReadAt(p, off)
}

// check fails t unless every recorded read lies within [lo, hi).
func (r *readRecorder) check(t *testing.T, what string, lo, hi int64) {
	t.Helper()
	for _, rd := range r.reads {
		if rd[0] < lo || rd[1] > hi-rd[0] {
			t.Fatalf("%s read %d bytes at %#x, outside the %d-byte file", what, rd[1], rd[0], hi)
		}
	}
}
