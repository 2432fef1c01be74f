package arch

import (
	"debug/elf"
	"os"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestCFAShareLazyEstimate holds the lazy table's estimate of the
// frame-pointer share (256 FDEs) to the full table's count of every row,
// on fixtures built with and without frame pointers, system libraries,
// Python and a Go program: the same side of --unwind auto's 10% line, and
// within 5 points.
func TestCFAShareLazyEstimate(t *testing.T) {
	files := append([]string{
		testbuild.CC(t, "gcc", "", []string{"testdata/deep.c"}, "-O2", "-g", "-fomit-frame-pointer"),
		testbuild.CC(t, "gcc", "", []string{"testdata/deep.c"}, "-O2", "-g", "-fno-omit-frame-pointer"),
		buildGo(t, "goprog"),
		"/usr/bin/python3",
	}, lazyLibraries...)
	for _, path := range files {
		f, err := elf.Open(path)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		full, err := NewTableELF(f, path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		lazy, err := NewLazyTableELF(f, path)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		fp := lazy.Arch.FP()
		fm, ft := full.CFAShare(fp, 0)
		lm, lt := lazy.CFAShare(fp, 256)
		if ft == 0 || lt == 0 {
			t.Errorf("%s: no rows counted (full %d, lazy %d)", path, ft, lt)
			continue
		}
		fs, ls := float64(fm)/float64(ft), float64(lm)/float64(lt)
		t.Logf("%s: full %d/%d = %.1f%%, lazy estimate %d/%d = %.1f%%", path, fm, ft, 100*fs, lm, lt, 100*ls)
		if (10*fm >= ft) != (10*lm >= lt) {
			t.Errorf("%s: the estimate %.1f%% and the full count %.1f%% fall on different sides of 10%%", path, 100*ls, 100*fs)
		}
		if d := fs - ls; d > 0.05 || d < -0.05 {
			t.Errorf("%s: estimate %.1f%% is more than 5 points from %.1f%%", path, 100*ls, 100*fs)
		}
	}
}
