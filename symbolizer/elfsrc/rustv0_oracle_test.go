package elfsrc

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
)

// v0Oracle names Rust v0 symbols ("_R…") with llvm-cxxfilt-19, the
// oracle the symbolizer's v0 names are held to: LLVM 19 demangles v0
// names as rustc-demangle does, the llvm-symbolizer the other names are
// compared with is older. Names are gathered first (add) and demangled in
// one run of the tool (run).
type v0Oracle struct {
	names []string
	llvm  map[string]string
}

func (o *v0Oracle) add(name string) {
	if o.llvm == nil {
		o.llvm = map[string]string{}
	}
	for _, n := range append([]string{name}, v0Variants(name)...) {
		if _, ok := o.llvm[n]; !ok {
			o.llvm[n] = ""
			o.names = append(o.names, n)
		}
	}
}

// v0Variants are the mangled names whose LLVM demangling the known
// differences (v0Difference) compare our name with.
func v0Variants(name string) []string {
	if strings.Contains(name, "00u") {
		return []string{strings.ReplaceAll(name, "00u", "00")}
	}
	return nil
}

func (o *v0Oracle) run(t *testing.T) {
	t.Helper()
	if len(o.names) == 0 {
		return
	}
	tool := testbuild.Need(t, "llvm-cxxfilt-19", "the oracle for Rust v0 names")
	cmd := exec.Command(tool)
	cmd.Stdin = strings.NewReader(strings.Join(o.names, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-cxxfilt-19: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(o.names) {
		t.Fatalf("llvm-cxxfilt-19 printed %d lines for %d names", len(lines), len(o.names))
	}
	for i, n := range o.names {
		if lines[i] == n {
			t.Errorf("llvm-cxxfilt-19 does not demangle %s", n)
		}
		o.llvm[n] = lines[i]
	}
}

// replace returns llvm-symbolizer's block with the function line of each
// frame whose name is a v0 name (raw holds our frames with names left
// mangled) replaced by LLVM 19's demangling, and how many it replaced.
// A block with another number of frames than ours is returned unchanged:
// it differs from ours anyway.
func (o *v0Oracle) replace(block string, raw []symbolizer.Frame) (string, int) {
	lines := strings.Split(block, "\n")
	// A block is "func\nfile:line:col\n" per frame, then a blank line.
	if len(lines) != 2*len(raw)+2 {
		return block, 0
	}
	n := 0
	for i, f := range raw {
		if d := o.llvm[f.Function]; d != "" {
			lines[2*i] = d
			n++
		}
	}
	return strings.Join(lines, "\n"), n
}

// v0Difference explains why our demangling of the v0 name mangled
// differs from LLVM 19's (want) and is still expected: each is a bug of
// the demangle package, recognized by the mangled form that triggers it
// and by our output being exactly what that bug makes of LLVM's.
// "" when unexplained.
//
//   - demangle-v0-leading-zero: the package reads "00" — the empty
//     identifiers of a closure in a closure, "NCNC…00" — as one decimal
//     number (v0 allows no leading zeros), so the second identifier takes
//     the next "u", a unit type generic argument, as its Punycode flag,
//     and "()" goes missing:
//     "with_current_name::<{closure#0}>" for
//     "with_current_name::<{closure#0}, ()>". Recognized: the name holds
//     "00u" and ours is LLVM's demangling of the name without that "u".
//   - demangle-v0-empty-ident: a path in an internal (lower-case)
//     namespace with an empty identifier — "Nc…0", a tuple-struct or
//     variant constructor used as a value, such as Option::Some passed
//     to map — ends in "::" in the package's output: "Option<T>::Some::"
//     for "Option<T>::Some". Recognized: the name holds such a path and
//     ours is LLVM's with "::" before each '>' or ',' (or at the end).
func v0Difference(mangled, ours, want string, o *v0Oracle) string {
	if strings.Contains(mangled, "00u") && ours == o.llvm[strings.ReplaceAll(mangled, "00u", "00")] {
		return "demangle-v0-leading-zero"
	}
	if strings.Contains(mangled, "Nc") && trimEmptyIdents(ours) == want {
		return "demangle-v0-empty-ident"
	}
	return ""
}

// trimEmptyIdents drops a "::" that no identifier follows.
func trimEmptyIdents(s string) string {
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		if s[i] == ':' && i+1 < len(s) && s[i+1] == ':' && (i+2 == len(s) || s[i+2] == '>' || s[i+2] == ',') {
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
