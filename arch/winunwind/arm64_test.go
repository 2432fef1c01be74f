package winunwind

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

// buildARM64 builds testdata/arm64.c into a Windows arm64 image (cached by
// source hash).
func buildARM64(t *testing.T) string {
	testbuild.NeedAll(t, "the test runs it", "clang", "lld-link", "llvm-readobj")
	src, _ := filepath.Abs("testdata/arm64.c")
	code, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(code)
	cache := testbuild.CacheRoot()
	dir := filepath.Join(cache, "rawstack-test", "winunwind-arm64", hex.EncodeToString(h[:8]))
	exe := filepath.Join(dir, "arm64.exe")
	if _, err := os.Stat(exe); err == nil {
		return exe
	}
	os.MkdirAll(dir, 0o755)
	for _, c := range [][]string{
		{"clang", "--target=aarch64-pc-windows-msvc", "-O2", "-c", src, "-o", "arm64.obj"},
		{"lld-link", "/nodefaultlib", "/entry:main", "/subsystem:console", "arm64.obj", "/out:arm64.tmp.exe"},
	} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	if err := os.Rename(filepath.Join(dir, "arm64.tmp.exe"), exe); err != nil {
		t.Fatal(err)
	}
	return exe
}

type readobjFn struct {
	va       uint64
	fields   map[string]string
	prologue []string
	epilogs  [][]string // per scope: "start index", then its opcodes
}

var spaceSemi = regexp.MustCompile(`\s+;`)

// readobjARM64 parses llvm-readobj --unwind of an arm64 image.
func readobjARM64(t *testing.T, exe string) []*readobjFn {
	out, err := exec.Command("llvm-readobj", "--unwind", exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	var fns []*readobjFn
	var cur *readobjFn
	var list *[]string
	for _, ln := range strings.Split(string(out), "\n") {
		ln = strings.TrimSpace(ln)
		switch {
		case strings.HasPrefix(ln, "Function: "):
			va, _ := strconv.ParseUint(strings.TrimPrefix(ln, "Function: 0x"), 16, 64)
			cur = &readobjFn{va: va, fields: map[string]string{}}
			fns = append(fns, cur)
			list = nil
		case cur == nil:
		case ln == "Prologue [":
			list = &cur.prologue
		case strings.HasPrefix(ln, "EpilogueScope {"):
			cur.epilogs = append(cur.epilogs, []string{""})
			list = nil
		case ln == "Opcodes [":
			list = &cur.epilogs[len(cur.epilogs)-1]
		case ln == "]":
			list = nil
		case list != nil:
			*list = append(*list, spaceSemi.ReplaceAllString(ln, " ;"))
		case strings.Contains(ln, ": "):
			k, v, _ := strings.Cut(ln, ": ")
			if k == "StartOffset" || k == "EpilogueStartIndex" {
				e := &cur.epilogs[len(cur.epilogs)-1][0]
				*e = strings.TrimSpace(*e + " " + v)
			} else {
				cur.fields[k] = v
			}
		}
	}
	return fns
}

func render(ops []ARM64Op, epilog, withCode bool) []string {
	var s []string
	for _, o := range ops {
		if withCode {
			s = append(s, fmt.Sprintf("0x%s ; %s", hex.EncodeToString(o.Code), o.String(epilog)))
		} else {
			s = append(s, o.String(epilog))
		}
	}
	return s
}

// TestARM64AgainstReadobj decodes the .pdata/.xdata of a clang-built
// Windows arm64 image and compares every entry with llvm-readobj --unwind:
// packed fields and the canonical prolog they stand for, .xdata headers,
// prolog codes and epilog scopes.
func TestARM64AgainstReadobj(t *testing.T) {
	exe := buildARM64(t)
	img, err := pe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	pdata, err := img.ExceptionData()
	if err != nil {
		t.Fatal(err)
	}
	fns, err := ParseARM64FunctionTable(pdata)
	if err != nil {
		t.Fatal(err)
	}
	want := readobjARM64(t, exe)
	if len(want) != len(fns) {
		t.Fatalf("%d functions, llvm-readobj %d", len(fns), len(want))
	}
	packed, unpacked := 0, 0
	for i, fn := range fns {
		w := want[i]
		if img.ImageBase+uint64(fn.Begin) != w.va {
			t.Errorf("function %d at %#x, llvm-readobj %#x", i, img.ImageBase+uint64(fn.Begin), w.va)
			continue
		}
		if fn.Packed() {
			packed++
			p := DecodeARM64Packed(fn.UnwindData)
			got := fmt.Sprintf("%d %d %d %v %d %d", p.FunctionLength, p.RegF, p.RegI, p.H, p.CR, p.FrameSize)
			h := w.fields["HomedParameters"] == "Yes"
			exp := fmt.Sprintf("%s %s %s %v %s %s", w.fields["FunctionLength"], w.fields["RegF"], w.fields["RegI"], h, w.fields["CR"], w.fields["FrameSize"])
			if got != exp {
				t.Errorf("%#x packed fields %s, llvm-readobj %s", w.va, got, exp)
			}
			if g := render(p.Ops(), false, false); strings.Join(g, "|") != strings.Join(w.prologue, "|") {
				t.Errorf("%#x packed prolog\n got  %q\n want %q", w.va, g, w.prologue)
			}
			continue
		}
		unpacked++
		x, err := DecodeARM64XData(img, fn.UnwindData)
		if err != nil {
			t.Errorf("%#x: %v", w.va, err)
			continue
		}
		if fmt.Sprint(x.FunctionLength) != w.fields["FunctionLength"] {
			t.Errorf("%#x function length %d, llvm-readobj %s", w.va, x.FunctionLength, w.fields["FunctionLength"])
		}
		ops, err := DecodeARM64Codes(x.Codes, 0)
		if err != nil {
			t.Errorf("%#x: %v", w.va, err)
		}
		if g := render(ops, false, true); strings.Join(g, "|") != strings.Join(w.prologue, "|") {
			t.Errorf("%#x prolog\n got  %q\n want %q", w.va, g, w.prologue)
		}
		if x.E {
			if w.fields["EpiloguePacked"] != "Yes" || fmt.Sprint(x.Epilogs[0].StartIndex) != w.fields["EpilogueOffset"] {
				t.Errorf("%#x packed epilog index %d, llvm-readobj %v", w.va, x.Epilogs[0].StartIndex, w.fields)
			}
			continue
		}
		if len(x.Epilogs) != len(w.epilogs) {
			t.Errorf("%#x: %d epilog scopes, llvm-readobj %d", w.va, len(x.Epilogs), len(w.epilogs))
			continue
		}
		for j, e := range x.Epilogs {
			eops, err := DecodeARM64Codes(x.Codes, e.StartIndex)
			if err != nil {
				t.Errorf("%#x: %v", w.va, err)
			}
			g := append([]string{fmt.Sprintf("%d %d", e.Start/4, e.StartIndex)}, render(eops, true, true)...)
			if strings.Join(g, "|") != strings.Join(w.epilogs[j], "|") {
				t.Errorf("%#x epilog %d\n got  %q\n want %q", w.va, j, g, w.epilogs[j])
			}
		}
	}
	t.Logf("%d packed and %d unpacked entries agree with llvm-readobj", packed, unpacked)
	if packed == 0 || unpacked == 0 {
		t.Errorf("fixture lacks packed (%d) or unpacked (%d) entries", packed, unpacked)
	}
}
