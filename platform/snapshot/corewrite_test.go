package snapshot

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/rawstack/rawstack/arch"
)

// TestWriteCore writes an Image and reads it back with debug/elf: the
// segments hold the runs where they belong and zeros elsewhere, and the
// notes carry each thread's registers.
func TestWriteCore(t *testing.T) {
	regs := make([]uint64, gregsAMD64)
	for i := range regs {
		regs[i] = uint64(i) * 0x1111
	}
	im := &Image{
		Pid: 42, Arch: arch.AMD64,
		Threads: []ImageThread{{Tid: 42, Gregs: regs}, {Tid: 43, Gregs: regs}},
		Auxv:    []byte{9, 0, 0, 0, 0, 0, 0, 0, 0x78, 0x56, 0x34, 0x12, 0, 0, 0, 0},
		Files:   []FileMapping{{Start: 0x400000, End: 0x401000, Offset: 0, Path: "/bin/prog"}},
		Regions: []Region{
			{Start: 0x10000, End: 0x13000, Perms: "rw-p", Runs: []Run{{Addr: 0x11000, Data: bytes.Repeat([]byte{0xab}, pageSize)}}},
			{Start: 0x20000, End: 0x21000, Perms: "r--p"},
		},
	}
	path := filepath.Join(t.TempDir(), "core")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := im.WriteCore(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	if ef.Type != elf.ET_CORE || ef.Machine != elf.EM_X86_64 || len(ef.Progs) != 3 {
		t.Fatalf("type %v machine %v progs %d", ef.Type, ef.Machine, len(ef.Progs))
	}
	load := ef.Progs[1]
	if load.Type != elf.PT_LOAD || load.Vaddr != 0x10000 || load.Filesz != 0x3000 || load.Flags != elf.PF_R|elf.PF_W {
		t.Fatalf("first load %+v", load.ProgHeader)
	}
	data := make([]byte, load.Filesz)
	if _, err := load.ReadAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if data[0] != 0 || data[0x1000] != 0xab || data[0x1fff] != 0xab || data[0x2000] != 0 {
		t.Errorf("segment bytes: %x %x %x %x", data[0], data[0x1000], data[0x1fff], data[0x2000])
	}
	notes := make([]byte, ef.Progs[0].Filesz)
	ef.Progs[0].ReadAt(notes, 0)
	le := binary.LittleEndian
	var tids []uint32
	var types []uint32
	for len(notes) >= 12 {
		nsz, dsz, typ := le.Uint32(notes), le.Uint32(notes[4:]), le.Uint32(notes[8:])
		desc := notes[12+(nsz+3)&^3:]
		types = append(types, typ)
		if typ == ntPrstatus {
			tids = append(tids, le.Uint32(desc[32:]))
			if got := le.Uint64(desc[prstatusRegOff+16*8:]); got != 16*0x1111 { // rip
				t.Errorf("rip in the note: %#x", got)
			}
		}
		notes = notes[12+(nsz+3)&^3+(dsz+3)&^3:]
	}
	if len(tids) != 2 || tids[0] != 42 || tids[1] != 43 || len(types) != 4 || types[2] != ntAuxv || types[3] != ntFile {
		t.Errorf("notes: types %x tids %v", types, tids)
	}
}
