package winunwind

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/internal/wine"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

// wineRegs are the registers selfunwind.c prints, as DWARF numbers; -6 and
// -15 stand for the low halves of xmm6 and xmm15.
var wineRegs = []int{arch.AMD64RIP, arch.AMD64RSP, arch.AMD64RBX, arch.AMD64RBP, arch.AMD64RSI, arch.AMD64RDI, 12, 13, 14, 15, -6, -15}

type wineSample struct {
	start  []uint64
	stack  []byte
	frames [][]uint64
}

// runSelfUnwind builds testdata/selfunwind.c with one compiler, runs it
// under Wine and returns the image and its output. Binaries and outputs
// are cached by the hash of the source and the command; the Wine prefix
// is cached too (its first boot takes a minute).
func runSelfUnwind(t *testing.T, compiler []string) (exe string, base, size uint64, samples []wineSample) {
	t.Helper()
	testbuild.NeedAll(t, "cannot run the RtlVirtualUnwind comparison", compiler[0], "wine")
	src, _ := filepath.Abs("testdata/selfunwind.c")
	code, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write(code)
	fmt.Fprintf(h, "%q", compiler)
	cacheRoot := testbuild.CacheRoot()
	cacheRoot = filepath.Join(cacheRoot, "rawstack-test")
	dir := filepath.Join(cacheRoot, "winunwind", hex.EncodeToString(h.Sum(nil))[:16])
	exe = filepath.Join(dir, "selfunwind.exe")
	outPath := filepath.Join(dir, "out.txt")
	if _, err := os.Stat(outPath); err != nil {
		os.MkdirAll(dir, 0o755)
		args := append(append([]string{}, compiler[1:]...), "-O2", src, "-o", exe)
		if out, err := exec.Command(compiler[0], args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", compiler[0], args, err, out)
		}
		// The shared prefix (internal/wine); a Wine that hangs must not
		// hold the test run forever.
		w := wine.Need(t)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := w.Command(ctx, exe, outPath+".tmp")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("wine %s: %v\n%s", exe, err, out)
		}
		if err := os.Rename(outPath+".tmp", outPath); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	nums := func(s string) []uint64 {
		var v []uint64
		for _, x := range strings.Fields(s) {
			n, err := strconv.ParseUint(x, 16, 64)
			if err != nil {
				t.Fatalf("bad number %q in %s", x, outPath)
			}
			v = append(v, n)
		}
		return v
	}
	var cur *wineSample
	for sc.Scan() {
		ln := sc.Text()
		if ln == "" {
			continue
		}
		switch ln[0] {
		case 'B':
			v := nums(ln[2:])
			base, size = v[0], v[1]
		case 'S':
			samples = append(samples, wineSample{start: nums(ln[2:])})
			cur = &samples[len(samples)-1]
		case 'M':
			if cur.stack, err = hex.DecodeString(ln[2:]); err != nil {
				t.Fatal(err)
			}
		case 'F':
			cur.frames = append(cur.frames, nums(ln[2:]))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return exe, base, size, samples
}

func setRegs(c *Context, v []uint64) {
	for i, r := range wineRegs {
		if r < 0 {
			binary.LittleEndian.PutUint64(c.XMM[-r][:], v[i])
			continue
		}
		c.Regs.R[r] = v[i]
		c.Regs.Mask |= 1 << r
	}
}

func getRegs(c *Context) []uint64 {
	v := make([]uint64, len(wineRegs))
	for i, r := range wineRegs {
		if r < 0 {
			v[i] = binary.LittleEndian.Uint64(c.XMM[-r][:])
		} else {
			v[i] = c.Regs.R[r]
		}
	}
	return v
}

// TestAgainstWineRtlVirtualUnwind single-steps a program under Wine and, at
// every instruction of the traced functions (prologs, bodies, epilogs, the
// stack probe), compares each frame Wine's RtlVirtualUnwind produces with
// this package's.
func TestAgainstWineRtlVirtualUnwind(t *testing.T) {
	for _, tc := range []struct {
		name     string
		compiler []string
	}{
		{"gcc", []string{"x86_64-w64-mingw32-gcc"}},
		{"clang", []string{"clang", "--target=x86_64-w64-mingw32", "-fuse-ld=lld", "-L/usr/lib/gcc/x86_64-w64-mingw32/12-win32"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe, base, size, samples := runSelfUnwind(t, tc.compiler)
			img, err := pe.Open(exe)
			if err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			pdata, err := img.ExceptionData()
			if err != nil {
				t.Fatal(err)
			}
			fns, err := ParseFunctionTable(pdata)
			if err != nil {
				t.Fatal(err)
			}
			u := &Unwinder{}
			u.Add(&Module{Base: base, Size: size, Functions: fns, Image: img})
			pcs := map[uint64]bool{}
			frames, agree, samplesOK := 0, 0, 0
			shown := 0
			for _, s := range samples {
				var c Context
				c.Regs.Arch = arch.AMD64
				setRegs(&c, s.start)
				pcs[s.start[0]] = true
				mem := &arch.StackCopy{Addr: s.start[1], Data: s.stack}
				ok := true
				for i, want := range s.frames {
					frames++
					err := u.Step(&c, mem)
					got := getRegs(&c)
					if err == nil && fmt.Sprint(got) == fmt.Sprint(want) {
						agree++
						continue
					}
					ok = false
					if shown < 10 {
						shown++
						t.Logf("pc %#x frame %d: err %v\n got  %x\n want %x", s.start[0], i, err, got, want)
					}
					break
				}
				if ok {
					samplesOK++
				}
			}
			t.Logf("%s: %d steps at %d distinct PCs; %d/%d frames and %d/%d steps agree with RtlVirtualUnwind",
				tc.name, len(samples), len(pcs), agree, frames, samplesOK, len(samples))
			if len(pcs) < 50 || frames < 200 {
				t.Errorf("too few samples: %d PCs, %d frames", len(pcs), frames)
			}
			if samplesOK != len(samples) {
				t.Errorf("%d of %d steps disagree with Wine", len(samples)-samplesOK, len(samples))
			}
		})
	}
}
