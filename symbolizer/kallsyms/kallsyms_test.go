package kallsyms

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

func TestParseAndSymbolize(t *testing.T) {
	f, err := os.Open("testdata/kallsyms.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := Parse(f, "kallsyms.txt")
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[uint64]string{
		0xffffffff81000000: "srso_alias_untrain_ret", // first of the names at one address
		0xffffffff81000085: "entry_SYSCALL_64",
		0xffffffff81000138: "syscall_return_via_sysret",
		0xffffffff82000010: "helper_fn [mymod]",
		0xffffffff82000100: "exported_fn [mymod]",
		0xffffffff80000000: "",
	} {
		fr, _ := tab.Symbolize(addr, nil)
		got := ""
		if len(fr) > 0 {
			got = fr[0].Function
		}
		if got != want {
			t.Errorf("%#x: %q, want %q", addr, got, want)
		}
	}
}

// TestManySymbols checks lookups in tables of several address groups and
// name blocks against the strings.Fields reference: runs of names at one
// address that cross group boundaries, gaps of every varint size, and a
// file out of address order (as module symbols can be), which parse
// sorts.
func TestManySymbols(t *testing.T) {
	for _, shuffled := range []bool{false, true} {
		var b strings.Builder
		type line struct {
			addr uint64
			text string
		}
		var lines []line
		addr := uint64(0xffffffff81000000)
		for i := range 3000 {
			switch {
			case i%97 < 70: // runs of up to 70 names at one address
			case i%5 == 0:
				addr += 1 << 20 // a 3-byte gap
			default:
				addr += uint64(1 + i%300)
			}
			lines = append(lines, line{addr, strconv.FormatUint(addr, 16) + " t fn" + strconv.Itoa(i) + "\n"})
		}
		if shuffled {
			// blocks of 50 lines in reverse order: each block sorted
			for i, j := 0, len(lines)-50; i < j; i, j = i+50, j-50 {
				for k := range 50 {
					lines[i+k], lines[j+k] = lines[j+k], lines[i+k]
				}
			}
		}
		for _, l := range lines {
			b.WriteString(l.text)
		}
		data := []byte(b.String())
		tab, err := Parse(bytes.NewReader(data), "many")
		if err != nil {
			t.Fatal(err)
		}
		ref, err := refParse(data)
		if err != nil {
			t.Fatal(err)
		}
		if (tab.ord != nil) != shuffled || tab.Len() != len(ref) {
			t.Fatalf("shuffled %v: ord %v, %d symbols, reference %d", shuffled, tab.ord != nil, tab.Len(), len(ref))
		}
		for _, l := range lines {
			for _, a := range []uint64{l.addr - 1, l.addr, l.addr + 1} {
				fr, _ := tab.Symbolize(a, nil)
				got := ""
				if len(fr) > 0 {
					got = fr[0].Function
				}
				if want := refSymbolize(ref, a); got != want {
					t.Fatalf("shuffled %v: %#x: %q, reference %q", shuffled, a, got, want)
				}
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	if _, err := Parse(strings.NewReader("0000000000000000 T a\n0000000000000000 t b\n"), "x"); !errors.Is(err, ErrHidden) {
		t.Errorf("zero addresses: %v, want ErrHidden", err)
	}
	var fe *FormatError
	if _, err := Parse(strings.NewReader("ffffffff81000000 T ok\nnonsense\n"), "x"); !errors.As(err, &fe) || fe.Line != 2 {
		t.Errorf("bad line: %v, want a FormatError on line 2", err)
	}
}

// TestRunningKernel symbolizes the running kernel's _stext through the
// opener, as report does for a trace recorded on this machine.
func TestRunningKernel(t *testing.T) {
	notes, err := os.ReadFile("/sys/kernel/notes")
	if err != nil {
		testbuild.Skip(t, "no kernel notes: %v", err)
	}
	id := locate.NoteBuildID(notes, binary.NativeEndian)
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		testbuild.Skip(t, "no /proc/kallsyms: %v", err)
	}
	tab, err := Parse(bytes.NewReader(data), "/proc/kallsyms")
	if errors.Is(err, ErrHidden) {
		testbuild.Skip(t, "kallsyms addresses hidden from this user")
	}
	if err != nil {
		t.Fatal(err)
	}
	if tab.Len() < 1000 || len(id) == 0 {
		t.Fatalf("%d symbols, build id %x", tab.Len(), id)
	}
	m := &symbolizer.Module{ModuleLoad: format.ModuleLoad{Kind: format.ModuleKernel, BuildID: id}}
	o, err := OpenModule(m, &symbolizer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fr, _ := o.Source.Symbolize(tab.addrs.at(tab.Len()/2)+1, nil)
	if len(fr) != 1 || fr[0].Function == "" {
		t.Errorf("frames %v", fr)
	}
	m.BuildID = []byte{1, 2, 3}
	if _, err := OpenModule(m, &symbolizer.Options{}); err == nil {
		t.Error("a kernel with another build id was symbolized with this one's kallsyms")
	}
}

func FuzzParse(f *testing.F) {
	seed, _ := os.ReadFile("testdata/kallsyms.txt")
	f.Add(seed, uint64(0xffffffff81000085))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		tab, err := Parse(bytes.NewReader(data), "fuzz")
		ref, refErr := refParse(data)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("Parse: %v, strings.Fields reference: %v", err, refErr)
		}
		if err != nil {
			return
		}
		if tab.Len() != len(ref) {
			t.Fatalf("%d symbols, reference %d", tab.Len(), len(ref))
		}
		for _, a := range []uint64{addr, addr - 1, addr + 1} {
			fr, _ := tab.Symbolize(a, nil)
			got := ""
			if len(fr) > 0 {
				got = fr[0].Function
			}
			if want := refSymbolize(ref, a); got != want {
				t.Fatalf("%#x: %q, reference %q", a, got, want)
			}
		}
	})
}

func TestParseLikeStringsFields(t *testing.T) {
	in := "0000FFFFFFFF81000000 T Upper\n" + // leading zeros, upper case
		"ffffffff81000010\u00a0t nbsp\n" + // Unicode space separates fields
		"ffffffff81000020 \vt\ttabbed\r\n" +
		"ffffffff81000030 t modfn\t[mod]\textra\n" +
		"ffffffff81000040 W notmod\tnot[mod]\n" +
		"ffffffff81000050 D data\n"
	ref, err := refParse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Parse(strings.NewReader(in), "x")
	if err != nil {
		t.Fatal(err)
	}
	if tab.Len() != len(ref) || tab.Len() != 5 {
		t.Fatalf("%d symbols, reference %d", tab.Len(), len(ref))
	}
	for _, a := range []uint64{0xffffffff81000000, 0xffffffff81000010, 0xffffffff81000025, 0xffffffff81000030, 0xffffffff81000040, 0xffffffff81000050} {
		fr, _ := tab.Symbolize(a, nil)
		if want := refSymbolize(ref, a); len(fr) != 1 || fr[0].Function != want {
			t.Errorf("%#x: %v, want %q", a, fr, want)
		}
	}
	for _, bad := range []string{"1ffffffffffffffff T big\n", "ffffffff8100000g T x\n", "+1 T x\n", "ff TT x\n"} {
		if _, err := Parse(strings.NewReader(bad), "x"); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// refParse is the plain parser Parse replaced (strings.Fields, one string
// per line), kept to check that the fast one reads files the same way.
func refParse(data []byte) ([]refSym, error) {
	var syms []refSym
	nonzero, n := false, 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for sc.Scan() {
		n++
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			if strings.TrimSpace(sc.Text()) == "" {
				continue
			}
			return nil, errors.New("short line")
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil || len(f[1]) != 1 {
			return nil, errors.New("bad address or type")
		}
		nonzero = nonzero || addr != 0
		switch f[1][0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		s := f[2]
		if len(f) > 3 && strings.HasPrefix(f[3], "[") {
			s += " " + f[3]
		}
		syms = append(syms, refSym{addr, s})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !nonzero && n > 0 {
		return nil, ErrHidden
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	return syms, nil
}

type refSym struct {
	addr uint64
	name string
}

func refSymbolize(syms []refSym, addr uint64) string {
	i := sort.Search(len(syms), func(i int) bool { return syms[i].addr > addr })
	if i == 0 {
		return ""
	}
	for i > 1 && syms[i-2].addr == syms[i-1].addr {
		i--
	}
	return syms[i-1].name
}

// TestByteTables checks the constant byte tables against their definition.
func TestByteTables(t *testing.T) {
	for c := 0; c < 256; c++ {
		wantClass := byte(cOther)
		switch {
		case strings.IndexByte(" \t\n\v\f\r", byte(c)) >= 0:
			wantClass = cSpace
		case c >= utf8.RuneSelf:
			wantClass = cHigh
		}
		if class[c] != wantClass {
			t.Errorf("class[%#x] = %d, want %d", c, class[c], wantClass)
		}
		var wantHex byte
		if v, err := strconv.ParseUint(string(rune(c)), 16, 8); err == nil && c < utf8.RuneSelf {
			wantHex = byte(v) + 1
		}
		if hexVal[c] != wantHex {
			t.Errorf("hexVal[%#x] = %d, want %d", c, hexVal[c], wantHex)
		}
	}
}

// at returns the i-th address (the tests' access to a table's addresses).
func (x *addrIndex) at(i int) (a uint64) {
	x.group(i/addrGroup, func(k int, v uint64) bool { a = v; return k < i })
	return a
}
