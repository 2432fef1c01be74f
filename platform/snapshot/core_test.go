package snapshot

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
)

// synthCore builds a small amd64 core: two threads whose frame-pointer
// chains live in one PT_LOAD segment, and PRPSINFO, AUXV and FILE notes.
// Thread 101's stack is pc 0x401000 → 0x402000 → 0x403000; thread 102's
// is pc 0x401100 → 0x402100.
func synthCore() []byte { return synthCoreArch(arch.AMD64) }

// synthCoreArch builds synthCore's core for amd64 or arm64 (same stacks:
// the frame records of both arches are [saved fp, return address]).
func synthCoreArch(a arch.Arch) []byte {
	le := binary.LittleEndian
	const stackBase = 0x7ff000
	stack := make([]byte, 0x1000)
	put := func(addr, v uint64) { le.PutUint64(stack[addr-stackBase:], v) }
	// Thread 101: rbp=stackBase+0x100 → [saved rbp, ra].
	put(stackBase+0x100, stackBase+0x200)
	put(stackBase+0x108, 0x402000)
	put(stackBase+0x200, 0)
	put(stackBase+0x208, 0x403000)
	// Thread 102.
	put(stackBase+0x800, 0)
	put(stackBase+0x808, 0x402100)

	var notes bytes.Buffer
	note := func(name string, typ uint32, desc []byte) {
		binary.Write(&notes, le, uint32(len(name)+1))
		binary.Write(&notes, le, uint32(len(desc)))
		binary.Write(&notes, le, typ)
		notes.WriteString(name + "\x00")
		for notes.Len()%4 != 0 {
			notes.WriteByte(0)
		}
		notes.Write(desc)
		for notes.Len()%4 != 0 {
			notes.WriteByte(0)
		}
	}
	ps := make([]byte, prpsinfoSize)
	le.PutUint32(ps[prpsinfoPid:], 101)
	copy(ps[prpsinfoFname:], "synth")
	copy(ps[prpsinfoArgs:], "synth -x")
	note("CORE", ntPRPSINFO, ps)
	status := func(tid int, rip, rsp, rbp uint64) {
		n, pcAt, spAt, fpAt := gregsAMD64, 16, 19, 4
		if a == arch.ARM64 {
			n, pcAt, spAt, fpAt = gregsARM64, 32, 31, 29
		}
		d := make([]byte, prstatusRegs+n*8+8)
		le.PutUint32(d[prstatusPid:], uint32(tid))
		g := d[prstatusRegs:]
		le.PutUint64(g[pcAt*8:], rip)
		le.PutUint64(g[spAt*8:], rsp)
		le.PutUint64(g[fpAt*8:], rbp)
		note("CORE", ntPRSTATUS, d)
	}
	status(101, 0x401000, stackBase+0x80, stackBase+0x100)
	status(102, 0x401100, stackBase+0x780, stackBase+0x800)
	auxv := make([]byte, 32)
	le.PutUint64(auxv, atENTRY)
	le.PutUint64(auxv[8:], 0x401000)
	note("CORE", ntAUXV, auxv)
	var file bytes.Buffer
	for _, v := range []uint64{1, 0x1000, 0x400000, 0x404000, 0} {
		binary.Write(&file, le, v)
	}
	file.WriteString("/nonexistent/synth\x00")
	note("CORE", ntFILE, file.Bytes())

	const ehsize, phsize = 64, 56
	noteOff := uint64(ehsize + 2*phsize)
	loadOff := (noteOff + uint64(notes.Len()) + 0xfff) &^ 0xfff
	out := make([]byte, loadOff+uint64(len(stack)))
	copy(out, "\x7fELF\x02\x01\x01")
	le.PutUint16(out[16:], uint16(elf.ET_CORE))
	machine := elf.EM_X86_64
	if a == arch.ARM64 {
		machine = elf.EM_AARCH64
	}
	le.PutUint16(out[18:], uint16(machine))
	le.PutUint32(out[20:], 1)
	le.PutUint64(out[32:], ehsize)
	le.PutUint16(out[52:], ehsize)
	le.PutUint16(out[54:], phsize)
	le.PutUint16(out[56:], 2)
	ph := out[ehsize:]
	le.PutUint32(ph, uint32(elf.PT_NOTE))
	le.PutUint64(ph[8:], noteOff)
	le.PutUint64(ph[32:], uint64(notes.Len()))
	le.PutUint64(ph[48:], 4)
	ph = ph[phsize:]
	le.PutUint32(ph, uint32(elf.PT_LOAD))
	le.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_W))
	le.PutUint64(ph[8:], loadOff)
	le.PutUint64(ph[16:], stackBase)
	le.PutUint64(ph[32:], uint64(len(stack)))
	le.PutUint64(ph[40:], uint64(len(stack)))
	copy(out[noteOff:], notes.Bytes())
	copy(out[loadOff:], stack)
	return out
}

func TestSynthCoreARM64(t *testing.T) {
	data := synthCoreArch(arch.ARM64)
	c, err := NewCore(bytes.NewReader(data), int64(len(data)), "synth-arm64")
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != arch.ARM64 || len(c.Threads) != 2 || c.Threads[0].Regs.FP() != 0x7ff100 {
		t.Fatalf("arch %v, threads %+v", c.Arch, c.Threads)
	}
	snap, err := c.Snapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := hexPCs(snap.Threads[0].PCs); got != " 0x401000 0x402000 0x403000" {
		t.Errorf("arm64 tid 101: %s (%v)", got, snap.Threads[0].Stop)
	}
}

func TestSynthCore(t *testing.T) {
	data := synthCore()
	c, err := NewCore(bytes.NewReader(data), int64(len(data)), "synth")
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != arch.AMD64 || c.Pid != 101 || c.Comm != "synth" || c.Args != "synth -x" {
		t.Errorf("core header: arch %v pid %d comm %q args %q", c.Arch, c.Pid, c.Comm, c.Args)
	}
	if len(c.Files) != 1 || c.Files[0] != (CoreMapping{0x400000, 0x404000, 0, "/nonexistent/synth"}) {
		t.Errorf("NT_FILE: %+v", c.Files)
	}
	if c.exePath() != "/nonexistent/synth" {
		t.Errorf("exe path %q", c.exePath())
	}
	snap, err := c.Snapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{101: " 0x401000 0x402000 0x403000", 102: " 0x401100 0x402100"}
	if len(snap.Threads) != 2 {
		t.Fatalf("%d threads", len(snap.Threads))
	}
	for _, th := range snap.Threads {
		if hexPCs(th.PCs) != want[th.Tid] || th.Stop != arch.StopOutermost {
			t.Errorf("tid %d: %s (%v), want %s", th.Tid, hexPCs(th.PCs), th.Stop, want[th.Tid])
		}
	}
	// The file is missing, so its mapping is not known to be executable.
	if len(snap.Modules) != 0 {
		t.Errorf("modules %+v, want none", snap.Modules)
	}

	// The stream round-trips through the format reader.
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, snap.Header(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Write(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := format.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[format.Kind]int{}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		kinds[ev.Kind]++
	}
	if kinds[format.KindProcess] != 1 || kinds[format.KindThreadStart] != 2 || kinds[format.KindStack] != 2 || kinds[format.KindSample] != 2 {
		t.Errorf("stream events %v", kinds)
	}
}

func TestCoreErrors(t *testing.T) {
	good := synthCore()
	for _, tc := range []struct {
		name string
		edit func(b []byte) []byte
		off  int64
	}{
		{"short", func(b []byte) []byte { return b[:20] }, 0},
		{"not elf", func(b []byte) []byte { b[0] = 0; return b }, 0},
		{"not core", func(b []byte) []byte { b[16] = 2; return b }, 16},
		{"phnum", func(b []byte) []byte { binary.LittleEndian.PutUint16(b[56:], 60000); return b }, 32},
		{"note size", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[64+32:], 1<<40); return b }, 64},
		{"truncated note", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[64+2*56+4:], 1<<20); return b }, 64 + 2*56},
	} {
		b := tc.edit(append([]byte(nil), good...))
		_, err := NewCore(bytes.NewReader(b), int64(len(b)), "bad.core")
		var ce *CoreError
		if !errors.As(err, &ce) {
			t.Errorf("%s: error %v, want a *CoreError", tc.name, err)
			continue
		}
		if ce.Off != tc.off || ce.File != "bad.core" {
			t.Errorf("%s: %v: offset %#x, want %#x", tc.name, err, ce.Off, tc.off)
		}
	}
}

// FuzzCore feeds the core reader and the unwinder over it arbitrary bytes,
// seeded with the synthetic core and the cores in testdata/fuzz.
func FuzzCore(f *testing.F) {
	f.Add(synthCore())
	f.Add(synthCoreArch(arch.ARM64))
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.core"))
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := NewCore(bytes.NewReader(data), int64(len(data)), "fuzz.core")
		if err != nil {
			var ce *CoreError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *CoreError", err)
			}
			return
		}
		snap, err := c.Snapshot(&Options{Root: "/nonexistent-root", MaxFrames: 64})
		if err != nil {
			return
		}
		for _, th := range snap.Threads {
			if len(th.PCs) > 64 {
				t.Fatalf("%d frames over MaxFrames", len(th.PCs))
			}
		}
	})
}

func TestParseMaps(t *testing.T) {
	text := "55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234   /usr/bin/my prog\n" +
		"55d0c0a01000-55d0c0a02000 r-xp 00001000 08:01 1234   /usr/bin/my prog\n" +
		"7ffd1000-7ffd3000 r-xp 00000000 00:00 0                  [vdso]\n" +
		"7ffe0000-7fff0000 rw-p 00000000 00:00 0 \n"
	maps, err := parseMaps([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) != 4 || maps[1].Path != "/usr/bin/my prog" || !maps[1].Exec() || maps[1].Offset != 0x1000 || maps[2].Path != "[vdso]" || maps[3].Path != "" {
		t.Errorf("parsed %+v", maps)
	}
	if _, err := parseMaps([]byte("zz-1 r-xp 0 0:0 0\n")); err == nil {
		t.Error("malformed line accepted")
	}
}

func TestCacheKeyPath(t *testing.T) {
	for in, want := range map[string]string{
		"/proc/123/root/usr/lib/libc.so.6": "/usr/lib/libc.so.6",
		"/proc/self/root/usr/lib/x":        "/proc/self/root/usr/lib/x",
		"/proc/12/map_files/1-2":           "/proc/12/map_files/1-2",
		"/usr/bin/ls":                      "/usr/bin/ls",
	} {
		if got := cacheKeyPath(in); got != want {
			t.Errorf("cacheKeyPath(%q) = %q, want %q", in, got, want)
		}
	}
}
