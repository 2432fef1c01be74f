package symbolizer

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestPyLineMatchesInterpreter holds PyLine to each interpreter's own
// reading of its line tables (co_lines, or dis.findlinestarts before
// 3.10) for every instruction of testdata/pylines.py, whose functions
// use the tables' forms: long line jumps, lines going backwards,
// instructions without a line, nested code.
func TestPyLineMatchesInterpreter(t *testing.T) {
	kinds := map[string]format.PyLineTable{"3.8": format.PyLineTableLnotab, "3.9": format.PyLineTableLnotab,
		"3.10": format.PyLineTable310, "3.11": format.PyLineTableLocations, "3.12": format.PyLineTableLocations, "3.13": format.PyLineTableLocations}
	for _, v := range []string{"3.8", "3.9", "3.10", "3.11", "3.12", "3.13"} {
		t.Run(v, func(t *testing.T) {
			python := testbuild.Python(t, v)
			out, err := exec.Command(python, filepath.Join("testdata", "pylines.py")).Output()
			if err != nil {
				t.Fatalf("%s pylines.py: %v", python, err)
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 1<<20)
			codes, checked := 0, 0
			for sc.Scan() {
				var c struct {
					Name  string
					First uint32
					Table string
					Lines [][3]*int
				}
				if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
					t.Fatal(err)
				}
				table, _ := hex.DecodeString(c.Table)
				codes++
				for _, r := range c.Lines {
					for off := *r[0]; off < *r[1]; off += 2 {
						got, ok := PyLine(kinds[v], table, c.First, uint32(off))
						checked++
						switch {
						case r[2] == nil && ok:
							t.Errorf("%s+%d: line %d, the interpreter gives none", c.Name, off, got)
						case r[2] != nil && (!ok || got != *r[2]):
							t.Errorf("%s+%d: line %d (%v), the interpreter gives %d", c.Name, off, got, ok, *r[2])
						}
					}
				}
			}
			t.Logf("%s: %d code objects, %d instructions agree", v, codes, checked)
			if codes < 8 || checked < 100 {
				t.Fatalf("only %d code objects, %d instructions", codes, checked)
			}
		})
	}
}

// TestSplicePython: each group of Python frames (ending at an entry
// frame) goes leafward of its evaluation frame, counted from the leaf;
// groups left without one go at the root end, in order; a stack with no
// evaluation frame gets none.
func TestSplicePython(t *testing.T) {
	b := newBuilder(format.Header{})
	native := func(name string) int {
		b.p.Locations = append(b.p.Locations, &Location{Frames: []Frame{{Function: name}}})
		return len(b.p.Locations) - 1
	}
	callee, eval1, mid, eval2, main := native("callee"), native(evalFunction), native("PyObject_Call"), native(evalFunction), native("main")
	for i, name := range []string{"gamma_py", "beta_py", "alpha_py", "outer_py"} {
		b.rf.Event(&format.Event{Kind: format.KindPyCode, PyCode: format.PyCode{ID: uint64(i + 1), Name: name, File: "app.py", FirstLine: uint32(10 * (i + 1))}})
	}
	b.rf.Event(&format.Event{Kind: format.KindPyStack, PyStack: format.PyStack{ID: 1, Frames: []format.PyFrame{{Code: 1}, {Code: 2, Entry: true}, {Code: 3, Entry: true}}}})
	b.rf.Event(&format.Event{Kind: format.KindPyStack, PyStack: format.PyStack{ID: 2, Frames: []format.PyFrame{{Code: 1, Entry: true}, {Code: 2, Entry: true}, {Code: 3, Entry: true}, {Code: 4}}}})
	b.addGo([]int{callee, eval1, mid, eval2, main}, 1, 0, 0, 0, 1)
	b.addGo([]int{callee, eval1, main}, 1, 0, 0, 0, 2)
	b.addGo([]int{callee, mid, main}, 1, 0, 0, 0, 1)
	b.splicePython()
	names := func(s *Sample) (out []string) {
		for _, li := range s.Locs {
			l := b.p.Locations[li]
			out = append(out, l.Frames[0].Function)
		}
		return out
	}
	for i, want := range [][]string{
		{"callee", "gamma_py", "beta_py", evalFunction, "PyObject_Call", "alpha_py", evalFunction, "main"},
		{"callee", "gamma_py", evalFunction, "main", "beta_py", "alpha_py", "outer_py"},
		{"callee", "PyObject_Call", "main"}, // no evaluation frame: no Python frames
	} {
		if got := names(b.p.Samples[i]); !slices.Equal(got, want) {
			t.Errorf("sample %d: %v, want %v", i, got, want)
		}
	}
	if l := b.p.Locations[b.p.Samples[0].Locs[1]]; l.Frames[0].File != "app.py" || l.Frames[0].Line != 10 || l.Module == nil || l.Module.Path != "[python]" {
		t.Errorf("gamma_py's location: %+v in %v", l.Frames[0], l.Module)
	}
}

// FuzzPyLine: a line table read from a trace is untrusted; no bytes make
// PyLine panic or loop, whatever the encoding they claim.
func FuzzPyLine(f *testing.F) {
	f.Add(uint8(format.PyLineTableLocations), []byte{0x80, 0x00, 0xd8, 0x08, 0x0c, 0xf0, 0x46, 0x03}, uint32(12), uint32(4))
	f.Add(uint8(format.PyLineTable310), []byte{6, 1, 8, 0x80, 2, 0xff}, uint32(1), uint32(10))
	f.Add(uint8(format.PyLineTableLnotab), []byte{2, 1, 4, 0xfe}, uint32(3), uint32(5))
	f.Fuzz(func(t *testing.T, kind uint8, table []byte, first, off uint32) {
		line, ok := PyLine(format.PyLineTable(kind%5), table, first, off)
		if !ok && line != 0 {
			t.Fatalf("no line, yet line %d", line)
		}
	})
}
