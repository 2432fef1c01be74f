package arch

import (
	"debug/elf"
	"encoding/binary"
	"testing"
)

// TestSelectedFDEs parses a few FDEs of a section by offset
// (Sections.EHFrameFDEs, as a snapshot's lazy tables do) and checks that
// every address those FDEs cover has the rule the whole section's table
// gives it, and that addresses outside them have none.
func TestSelectedFDEs(t *testing.T) {
	paths := []string{buildC(t, "gcc", "deep.c", "-O2", "-fomit-frame-pointer"), "/lib/x86_64-linux-gnu/libc.so.6"}
	for _, path := range paths {
		f, err := elf.Open(path)
		if err != nil {
			t.Logf("skipping %s: %v", path, err)
			continue
		}
		defer f.Close()
		eh, hdr := f.Section(".eh_frame"), f.Section(".eh_frame_hdr")
		if eh == nil || hdr == nil {
			t.Fatalf("%s: no .eh_frame or .eh_frame_hdr", path)
		}
		ehData, _ := eh.Data()
		hdrData, _ := hdr.Data()
		s := Sections{File: path, Arch: AMD64, EHFrame: ehData, EHFrameAddr: eh.Addr, EHFrameHdrAddr: hdr.Addr}
		full, err := NewTable(s)
		if err != nil {
			t.Fatal(err)
		}
		// The search table of .eh_frame_hdr: (pc, FDE) pairs, datarel sdata4.
		if hdrData[3] != 0x3b {
			t.Fatalf("%s: unusual search table encoding %#x", path, hdrData[3])
		}
		count := int(binary.LittleEndian.Uint32(hdrData[8:]))
		var pcs []uint64
		var offs []int
		for i := 0; i < count; i += max(1, count/7) { // about seven FDEs, spread out
			e := hdrData[12+i*8:]
			pcs = append(pcs, hdr.Addr+uint64(int64(int32(binary.LittleEndian.Uint32(e)))))
			offs = append(offs, int(hdr.Addr+uint64(int64(int32(binary.LittleEndian.Uint32(e[4:]))))-eh.Addr))
		}
		s.EHFrameFDEs = offs
		part, err := NewTable(s)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if part.FDEs != len(offs) {
			t.Errorf("%s: %d FDEs parsed, want %d", path, part.FDEs, len(offs))
		}
		checked := 0
		for _, pc := range pcs {
			// From the FDE's start to the first address the full table
			// leaves without a rule (the FDE's end, or the next FDE).
			for a := pc; a < pc+4096; a++ {
				want := full.Lookup(a)
				if got := part.Lookup(a); got != want {
					if want.CFA != CFANone && got.CFA == CFANone {
						break // the next FDE of the full table, not selected
					}
					t.Fatalf("%s: %#x: rule %v, the whole table has %v", path, a, got, want)
				}
				checked++
			}
		}
		if count/7 > 1 { // entry 1 was not selected: its start has no rule
			e := hdrData[12+8:]
			pc := hdr.Addr + uint64(int64(int32(binary.LittleEndian.Uint32(e))))
			if r := part.Lookup(pc); r.CFA != CFANone {
				t.Errorf("%s: %#x has rule %v from no selected FDE", path, pc, r)
			}
		}
		t.Logf("%s: %d of %d FDEs parsed, %d addresses agree", path, part.FDEs, full.FDEs, checked)
		// An offset that holds no FDE is a format error, not a crash.
		s.EHFrameFDEs = []int{0, len(ehData) + 5, -1}
		if _, err := NewTable(s); err == nil {
			t.Errorf("%s: offsets of a CIE and outside the section parsed without error", path)
		}
	}
}
