package dwarfline

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"
)

func load(t testing.TB, name string) []byte {
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The seeds are the line tables gcc -O2 -g wrote for
//
//	static int f(int x){return x*3;}
//	int main(int c,char**v){return f(c)+1;}
//
// built in /tmp/sx; llvm-dwarfdump --debug-line shows the rows checked here.
func TestParseSeeds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		secs    Sections
		file    uint64
		version uint16
	}{
		{"v4", Sections{Line: load(t, "v4.debug_line")}, 1, 4},
		{"v5", Sections{Line: load(t, "v5.debug_line"), LineStr: load(t, "v5.debug_line_str")}, 1, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := Parse(tc.secs, 0, 8, binary.LittleEndian)
			if err != nil {
				t.Fatal(err)
			}
			if tab.Version != tc.version {
				t.Errorf("version %d, want %d", tab.Version, tc.version)
			}
			if len(tab.Rows) != 8 || len(tab.Seqs) != 1 {
				t.Fatalf("%d rows in %d sequences, want 8 in 1", len(tab.Rows), len(tab.Seqs))
			}
			if s := tab.Seqs[0]; s.Low != 0x1040 || s.High != 0x1045 {
				t.Errorf("sequence [%#x, %#x), want [0x1040, 0x1045)", s.Low, s.High)
			}
			for _, c := range []struct {
				addr      uint64
				line, col int
				ok        bool
			}{
				{0x1040, 2, 36, true}, // last row at the address wins
				{0x1043, 2, 36, true},
				{0x1044, 2, 39, true},
				{0x1045, 0, 0, false}, // end of sequence is exclusive
				{0x103f, 0, 0, false},
			} {
				row, ok := tab.Lookup(c.addr)
				if ok != c.ok || ok && (int(row.Line) != c.line || int(row.Column) != c.col) {
					t.Errorf("Lookup(%#x) = %d:%d %v, want %d:%d %v", c.addr, row.Line, row.Column, ok, c.line, c.col, c.ok)
				}
			}
			name, ok := tab.FileName(tc.file, "/tmp/sx")
			if !ok || name != "/tmp/sx/t.c" {
				t.Errorf("FileName(%d) = %q %v, want /tmp/sx/t.c", tc.file, name, ok)
			}
			if _, ok := tab.FileName(99, "/tmp/sx"); ok {
				t.Errorf("FileName(99) succeeded")
			}
		})
	}
}

func TestParseErrorsNameOffset(t *testing.T) {
	b := load(t, "v4.debug_line")
	_, err := Parse(Sections{Line: b[:20]}, 0, 8, binary.LittleEndian)
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("truncated table: err = %v, want *FormatError", err)
	}
	if _, err := Parse(Sections{Line: b}, uint64(len(b)), 8, binary.LittleEndian); err == nil {
		t.Error("offset past the end: no error")
	}
}

func TestAppendPath(t *testing.T) {
	tab := &Table{Version: 4, Dirs: []string{"/usr/include/", "sub"}, Files: []FileEntry{
		{Name: "a.h", Dir: 1}, {Name: "b.c", Dir: 2}, {Name: "/abs/c.c", Dir: 2}, {Name: "d.c", Dir: 0},
	}}
	for i, want := range []string{"/usr/include/a.h", "/cu/sub/b.c", "/abs/c.c", "/cu/d.c"} {
		if got, _ := tab.FileName(uint64(i+1), "/cu"); got != want {
			t.Errorf("FileName(%d) = %q, want %q", i+1, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(load(f, "v4.debug_line"), []byte(nil))
	f.Add(load(f, "v5.debug_line"), load(f, "v5.debug_line_str"))
	f.Fuzz(func(t *testing.T, line, lineStr []byte) {
		tab, err := Parse(Sections{Line: line, LineStr: lineStr, Str: lineStr}, 0, 8, binary.LittleEndian)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FormatError", err)
			}
		}
		if tab == nil {
			return
		}
		if len(tab.Rows) > len(line) {
			t.Fatalf("%d rows from %d bytes", len(tab.Rows), len(line))
		}
		for _, s := range tab.Seqs {
			if row, ok := tab.Lookup(s.Low); !ok || row.Addr > s.Low {
				t.Fatalf("sequence start %#x not found", s.Low)
			}
		}
		for i := range tab.Files {
			tab.FileName(uint64(i), "/cu")
		}
	})
}
