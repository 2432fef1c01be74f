package msvc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// corpus compiles testdata/names.cpp for x86_64-pc-windows-msvc (cached by
// the shared fixture builder) and returns the decorated names of its object file.
func corpus(t *testing.T) []string {
	testbuild.NeedAll(t, "build and list the MSVC-mangled names", "clang", "llvm-nm")
	obj := testbuild.Build(t, testbuild.Cmd{
		Tool:   "clang",
		Args:   []string{"--target=x86_64-pc-windows-msvc", "-std=c++17", "-O0", "-c", "{in0}", "-o", "{dir}/names.obj"},
		Inputs: []string{filepath.Join("testdata", "names.cpp")},
		Out:    "names.obj",
	})
	out, err := exec.Command("llvm-nm", obj).Output()
	if err != nil {
		t.Fatalf("llvm-nm: %v", err)
	}
	seen := map[string]bool{}
	var names []string
	for _, ln := range strings.Split(string(out), "\n") {
		f := strings.Fields(ln)
		if len(f) == 0 {
			continue
		}
		n := f[len(f)-1]
		if strings.HasPrefix(n, "?") && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// undname runs llvm-undname on names with extra flags, one output per name
// ("" where it fails).
func undname(t *testing.T, names []string, args ...string) []string {
	cmd := exec.Command("llvm-undname", args...)
	cmd.Stdin = strings.NewReader(strings.Join(names, "\n") + "\n")
	// llvm-undname exits 1 when some name does not demangle; its output
	// still has a line for every name.
	out, err := cmd.Output()
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatalf("llvm-undname: %v", err)
	}
	// Output: per name, the name, the result, a blank line; for a name
	// that does not demangle the error goes to stderr and the result line
	// is missing.
	lines := strings.Split(string(out), "\n")
	var res []string
	p := 0
	for _, n := range names {
		if p >= len(lines) || lines[p] != n {
			t.Fatalf("llvm-undname output out of step at %q", n)
		}
		if p+1 < len(lines) && lines[p+1] == "" {
			res = append(res, "")
			p += 2
			continue
		}
		r := ""
		if p+1 < len(lines) {
			r = lines[p+1]
		}
		res = append(res, r)
		p += 3
	}
	if len(res) != len(names) {
		t.Fatalf("llvm-undname printed %d results for %d names", len(res), len(names))
	}
	return res
}

func TestAgreeWithLLVMUndname(t *testing.T) {
	testbuild.Need(t, "llvm-undname", "the demangling oracle")
	names := corpus(t)
	extra, err := os.ReadFile("testdata/extra.txt")
	if err != nil {
		t.Fatal(err)
	}
	// testdata/extra.txt: hand-picked names for constructs the compiled
	// corpus lacks (thunks, restrict/unaligned, ref-qualifiers, template
	// arguments of every kind, calling conventions...).
	names = append(names, strings.Fields(string(extra))...)
	if len(names) < 80 {
		t.Fatalf("corpus has only %d names", len(names))
	}
	for _, mode := range []struct {
		name  string
		flags Flags
		args  []string
	}{
		{"full", 0, nil},
		{"symbolizer", Symbolizer, []string{"--no-calling-convention", "--no-return-type", "--no-access-specifier", "--no-member-type"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			want := undname(t, names, mode.args...)
			agree, total, shown := 0, 0, 0
			for i, n := range names {
				if want[i] == "" {
					continue
				}
				total++
				got, err := Demangle(n, mode.flags)
				if err == nil && got == want[i] {
					agree++
					continue
				}
				if shown < 15 {
					shown++
					t.Logf("%s\n got  %q (%v)\n want %q", n, got, err, want[i])
				}
			}
			pct := 100 * float64(agree) / float64(total)
			t.Logf("%d/%d names agree with llvm-undname (%.1f%%)", agree, total, pct)
			if pct < 90 {
				t.Errorf("agreement %.1f%% below 90%%", pct)
			}
		})
	}
}

// TestExamples pins a few outputs, including ones where llvm-undname is
// not the reference (it is not installed everywhere).
func TestExamples(t *testing.T) {
	for _, tc := range []struct{ in, full, short string }{
		{"?area@Circle@geo@@UEBANXZ", "public: virtual double __cdecl geo::Circle::area(void) const", "geo::Circle::area(void) const"},
		{"??0Foo@@QEAA@XZ", "public: __cdecl Foo::Foo(void)", "Foo::Foo(void)"},
		{"?f@@YAXP6AHH@Z@Z", "void __cdecl f(int (__cdecl *)(int))", "f(int (__cdecl *)(int))"},
		{"?f@@YAXPEAY02H@Z", "void __cdecl f(int (*)[3])", "f(int (*)[3])"},
		{"?x@Foo@@2HA", "public: static int Foo::x", "int Foo::x"},
		{"?f@?1??g@@YAXXZ@4HA", "int `void __cdecl g(void)'::`2'::f", "int `void __cdecl g(void)'::`2'::f"},
		{"??$g@H$0A@@@YAXH@Z", "void __cdecl g<int, 0>(int)", "g<int, 0>(int)"},
	} {
		full, err := Demangle(tc.in, 0)
		if err != nil || full != tc.full {
			t.Errorf("Demangle(%q) = %q, %v; want %q", tc.in, full, err, tc.full)
		}
		short, err := Demangle(tc.in, Symbolizer)
		if err != nil || short != tc.short {
			t.Errorf("Demangle(%q, Symbolizer) = %q, %v; want %q", tc.in, short, err, tc.short)
		}
	}
	for _, bad := range []string{"", "?", "main", "?f@@YA", "?f@@YAXP", "??$", "?f@@YAX9@Z"} {
		if s, err := Demangle(bad, 0); err == nil {
			t.Errorf("Demangle(%q) = %q, want an error", bad, s)
		}
	}
}

func FuzzDemangle(f *testing.F) {
	for _, s := range []string{"?area@Circle@geo@@UEBANXZ", "?f@?1??g@@YAXXZ@4HA", "??$f@V?$basic_string@DU?$char_traits@D@std@@V?$allocator@D@2@@std@@@@YAXXZ",
		"?takes_funcs@@YAHP6AHH@ZP6AXXZP8Point@inner@outer@@EBAHHH@ZPEQ123@HP6A?AU123@U123@4@Z@Z", "??_7Base@inner@outer@@6B@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		full, err := Demangle(s, 0)
		short, err2 := Demangle(s, Symbolizer)
		// The flags shape the output, not what parses.
		if (err == nil) != (err2 == nil) {
			t.Fatalf("%q: error %v without flags, %v with Symbolizer", s, err, err2)
		}
		if again, _ := Demangle(s, 0); again != full {
			t.Fatalf("%q demangles to %q, then to %q", s, full, again)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) || full != "" {
				t.Fatalf("%q: %q with error %v, want \"\" and ErrInvalid", s, full, err)
			}
			return
		}
		// Text comes from the name or from the demangler's own words:
		// no control byte the name does not hold.
		for _, out := range []string{full, short} {
			for i := 0; i < len(out); i++ {
				if out[i] < 0x20 && strings.IndexByte(s, out[i]) < 0 {
					t.Fatalf("%q demangles to %q, with byte %#x at %d", s, out, out[i], i)
				}
			}
		}
		if len(full) > maxGrowth*len(s) || len(short) > len(full) {
			t.Fatalf("%d bytes demangle to %d (%d with Symbolizer)", len(s), len(full), len(short))
		}
	})
}

// maxGrowth bounds how much longer a demangled name is than the mangled
// one: back references (ten names, ten parameter types) copy text
// already printed.
const maxGrowth = 64
