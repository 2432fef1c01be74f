package pdb

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/symbolizer"
)

// formatFrames prints frames as llvm-symbolizer does: a function line and
// a file:line:column line per frame, "??" for unknowns.
func formatFrames(frames []symbolizer.Frame) []string {
	if len(frames) == 0 {
		return []string{"??", "??:0:0"}
	}
	var out []string
	for _, fr := range frames {
		fn, file := fr.Function, fr.File
		if fn == "" {
			fn = "??"
		}
		if file == "" {
			file = "??"
		}
		out = append(out, fn, fmt.Sprintf("%s:%d:%d", file, fr.Line, fr.Column))
	}
	return out
}

// TestAgreeWithLLVMSymbolizer symbolizes every byte of the fixtures'
// .text and compares function, inline chain and file:line with
// llvm-symbolizer's native PDB reader.
func TestAgreeWithLLVMSymbolizer(t *testing.T) {
	for _, kind := range fixtureKinds {
		t.Run(kind, func(t *testing.T) {
			fx := buildFixture(t, kind)
			base, start, end := textRange(t, fx.exe)
			f, err := Open(fx.pdb)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var vas []uint64
			for rva := start; rva < end; rva++ {
				vas = append(vas, base+uint64(rva))
			}
			want := llvmSymbolize(t, fx.exe, vas)
			agree, inlined, named, withCol := 0, 0, 0, 0
			var frames []symbolizer.Frame
			shown := 0
			for i, va := range vas {
				frames, err = f.Symbolize(va-base, frames[:0])
				if err != nil {
					t.Fatalf("%#x: %v", va-base, err)
				}
				got := formatFrames(frames)
				if len(want[i]) > 2 {
					inlined++
				}
				if want[i][0] != "??" {
					named++
				}
				if !strings.HasSuffix(want[i][len(want[i])-1], ":0") {
					withCol++
				}
				if strings.Join(got, "\n") == strings.Join(want[i], "\n") {
					agree++
					continue
				}
				if shown < 10 {
					shown++
					t.Logf("rva %#x:\n got  %q\n want %q", va-base, got, want[i])
				}
			}
			pct := 100 * float64(agree) / float64(len(vas))
			t.Logf("%s: %d/%d addresses agree (%.2f%%); llvm-symbolizer named %d, %d with inline frames, %d with a column", kind, agree, len(vas), pct, named, inlined, withCol)
			if strings.HasSuffix(kind, "-columns") && withCol < len(vas)/2 {
				t.Errorf("only %d addresses have a column", withCol)
			}
			if inlined == 0 || named < len(vas)/4 {
				t.Errorf("fixture too weak: %d named, %d inlined addresses", named, inlined)
			}
			if pct < 99.5 {
				t.Errorf("agreement %.2f%% below 99.5%%", pct)
			}
		})
	}
}

// TestConcurrent symbolizes from several goroutines at once on a fresh
// File (so that the lazy loading races) and checks every goroutine gets
// what a single one gets. Run with -race.
func TestConcurrent(t *testing.T) {
	fx := buildFixture(t, "mingw")
	_, start, end := textRange(t, fx.exe)
	ref, err := Open(fx.pdb)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	want := map[uint32]string{}
	for rva := start; rva < end; rva += 7 {
		fr, err := ref.Symbolize(uint64(rva), nil)
		if err != nil {
			t.Fatal(err)
		}
		want[rva] = fmt.Sprint(fr)
	}
	f, err := Open(fx.pdb)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			var fr []symbolizer.Frame
			for rva := start + uint32(g)*7; rva < end; rva += 7 {
				var err error
				if fr, err = f.Symbolize(uint64(rva), fr[:0]); err != nil {
					errs <- err
					return
				}
				if w, ok := want[rva]; ok && fmt.Sprint(fr) != w {
					errs <- fmt.Errorf("rva %#x: %v, want %s", rva, fr, w)
					return
				}
			}
			errs <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
