package procfs

import (
	"os"
	"testing"
)

func TestParseMaps(t *testing.T) {
	data, err := os.ReadFile("testdata/maps.txt")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := ParseMaps(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) != 12 {
		t.Fatalf("%d mappings, want 12", len(maps))
	}
	var exec []Mapping
	for _, m := range maps {
		if m.Exec() {
			exec = append(exec, m)
		}
	}
	if len(exec) != 6 {
		t.Errorf("%d executable mappings, want 6", len(exec))
	}
	m := maps[1]
	if m.Start != 0x55bc1ed7c000 || m.End != 0x55bc1ed7d000 || m.Offset != 0x1000 || m.Major != 0xfe || m.Minor != 1 || m.Inode != 1835107 || m.Path != "/root/.cache/rawstack-fixtures/0f2e3b33de9b78ce/chain" {
		t.Errorf("line 2 parsed as %+v", m)
	}
	if p := maps[9].Path; p != "/tmp/a file with spaces (deleted)" {
		t.Errorf("path with spaces parsed as %q", p)
	}
	if p := maps[6].Path; p != "" {
		t.Errorf("anonymous Mapping has path %q", p)
	}
	if _, err := ParseMaps([]byte("zz-10 r-xp 0 0:0 0 x\n")); err == nil {
		t.Error("bad address accepted")
	}
	if _, err := ParseMaps([]byte("20-10 r-xp 0 0:0 0 x\n")); err == nil {
		t.Error("inverted range accepted")
	}
}

func FuzzParseMaps(f *testing.F) {
	data, err := os.ReadFile("testdata/maps.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("0-1 ---p 0 0:0 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		maps, err := ParseMaps(b)
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.End < m.Start {
				t.Fatalf("accepted inverted range %+v", m)
			}
		}
	})
}
