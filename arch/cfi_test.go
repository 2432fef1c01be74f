package arch

import (
	"bufio"
	"bytes"
	"cmp"
	"debug/elf"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// oracleRow is one row of readelf --debug-dump=frames-interp.
type oracleRow struct {
	fde      string // "section+offset" of the FDE, for messages
	loc      uint64
	start    uint64
	end      uint64
	cfa      string            // "rsp+8", "exp", ...
	cols     map[string]string // register name → "c-8", "u", ...
	hasTable bool
}

var (
	reFDE = regexp.MustCompile(`^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	reRow = regexp.MustCompile(`^([0-9a-f]{8,16}) +(\S.*)$`)
)

// readelfRows runs readelf on path and returns the rows of section
// (".eh_frame" or ".debug_frame"), plus the FDEs without rows.
func readelfRows(t *testing.T, path, section string) (rows []oracleRow, fdes int) {
	t.Helper()
	testbuild.Need(t, "readelf", "binutils' readelf is the oracle of the CFI tables")
	// readelf exits 1 on some distribution libraries while printing every
	// table (it is unhappy with a section it does not need here).
	out, err := exec.Command("readelf", "--debug-dump=frames-interp", path).Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("readelf %s: %v", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	var cur string
	var fde *oracleRow
	var cols []string
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Contents of the ") {
			cur = strings.Fields(line)[3]
			fde = nil
			continue
		}
		if cur != section {
			continue
		}
		if m := reFDE.FindStringSubmatch(line); m != nil {
			s, _ := strconv.ParseUint(m[2], 16, 64)
			e, _ := strconv.ParseUint(m[3], 16, 64)
			fde = &oracleRow{fde: section + "+" + m[1], start: s, end: e}
			fdes++
			cols = nil
			continue
		}
		if strings.Contains(line, " CIE ") {
			fde = nil
			continue
		}
		if fde == nil {
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "LOC" {
			cols = f[1:]
			continue
		}
		if m := reRow.FindStringSubmatch(line); m != nil && cols != nil {
			loc, _ := strconv.ParseUint(m[1], 16, 64)
			// "r10 (r10)" (DW_CFA_register) is one value.
			var vals []string
			for _, v := range strings.Fields(m[2]) {
				if strings.HasPrefix(v, "(") && len(vals) > 0 {
					vals[len(vals)-1] += " " + v
				} else {
					vals = append(vals, v)
				}
			}
			r := *fde
			r.loc = loc
			r.cols = map[string]string{}
			for i, c := range cols {
				if i < len(vals) {
					if c == "CFA" {
						r.cfa = vals[i]
					} else {
						r.cols[c] = vals[i]
					}
				}
			}
			rows = append(rows, r)
		}
	}
	return rows, fdes
}

func regNum(a Arch, name string) int {
	if a == AMD64 {
		for i, n := range []string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"} {
			if n == name {
				return i
			}
		}
		return -1
	}
	if name == "sp" {
		return ARM64SP
	}
	if name == "pc" {
		return ARM64PC
	}
	if strings.HasPrefix(name, "x") {
		if n, err := strconv.Atoi(name[1:]); err == nil {
			return n
		}
	}
	return -1
}

// checkReg compares a register column of readelf with a RegKind.
func checkReg(k RegKind, off int32, want string) error {
	switch {
	case want == "u":
		if k != RegSame && k != RegUndefined {
			return fmt.Errorf("want unset/undefined, have %s", k.format(off))
		}
	case want == "s":
		if k != RegSame {
			return fmt.Errorf("want same, have %s", k.format(off))
		}
	case strings.HasPrefix(want, "c"):
		n, err := strconv.Atoi(want[1:])
		if err != nil {
			return err
		}
		if k != RegOffset || off != int32(n) {
			return fmt.Errorf("want %s, have %s", want, k.format(off))
		}
	case strings.HasPrefix(want, "v") && want != "vexp":
		n, err := strconv.Atoi(want[1:])
		if err != nil {
			return err
		}
		if k != RegValOffset || off != int32(n) {
			return fmt.Errorf("want %s, have %s", want, k.format(off))
		}
	case want == "exp":
		if k != RegAtFP && k != RegAtSP && k != RegUnsupported {
			return fmt.Errorf("want exp, have %s", k.format(off))
		}
	default:
		if k != RegUnsupported {
			return fmt.Errorf("want %s, have %s", want, k.format(off))
		}
	}
	return nil
}

func checkRow(a Arch, r Rule, o oracleRow) error {
	if o.cfa == "exp" {
		if r.CFA != CFADeref && r.CFA != CFAPLT && r.CFA != CFAUnsupported {
			return fmt.Errorf("cfa: want exp, have %v", r)
		}
	} else {
		i := strings.IndexAny(o.cfa, "+-")
		if i < 0 {
			return fmt.Errorf("cannot parse readelf CFA %q", o.cfa)
		}
		reg := regNum(a, o.cfa[:i])
		off, err := strconv.Atoi(o.cfa[i:])
		if err != nil || reg < 0 {
			return fmt.Errorf("cannot parse readelf CFA %q", o.cfa)
		}
		if r.CFA != CFAReg || int(r.CFAReg) != reg || int(r.CFAOff) != off {
			return fmt.Errorf("cfa: want %s (r%d%+d), have %v", o.cfa, reg, off, r)
		}
	}
	ra, ok := o.cols["ra"]
	if !ok {
		ra = "u"
	}
	if err := checkReg(r.RA, r.RAOff, ra); err != nil {
		return fmt.Errorf("ra: %w (%v)", err, r)
	}
	fpName := "rbp"
	if a == ARM64 {
		fpName = "x29"
	}
	fp, ok := o.cols[fpName]
	if !ok {
		fp = "u"
	}
	if err := checkReg(r.FP, r.FPOff, fp); err != nil {
		return fmt.Errorf("fp: %w (%v)", err, r)
	}
	names := map[int]string{AMD64RBX: "rbx", 12: "r12", 13: "r13", 14: "r14", 15: "r15"}
	for i, reg := range a.CalleeSaved() {
		name := names[reg]
		if a == ARM64 {
			name = fmt.Sprintf("x%d", reg)
		}
		want, ok := o.cols[name]
		have := r.Saved[i]
		switch {
		case !ok || want == "u" || want == "s":
			if have != 0 && have != SavedLost {
				return fmt.Errorf("%s: want %s, have %d", name, want, have)
			}
		case strings.HasPrefix(want, "c"):
			n, err := strconv.Atoi(want[1:])
			if err != nil || n == 0 || n%8 != 0 || n/8 < -127 || n/8 > 127 {
				if have != SavedLost {
					return fmt.Errorf("%s: want %s (unrepresentable), have %d", name, want, have)
				}
			} else if int(have) != n/8 {
				return fmt.Errorf("%s: want %s, have cfa%+d", name, want, int(have)*8)
			}
		case want == "exp" && r.SavedAtSP && have != 0:
			// sp-relative save slot of a signal frame
		default:
			if have != SavedLost {
				return fmt.Errorf("%s: want %s, have %d", name, want, have)
			}
		}
	}
	return nil
}

// compareWithReadelf checks every row readelf prints for section of path
// against the table built from that section alone.
func compareWithReadelf(t *testing.T, path, section string) *Table {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Section(section)
	if sec == nil {
		t.Fatalf("%s has no %s", path, section)
	}
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	a := AMD64
	if f.Machine == elf.EM_AARCH64 {
		a = ARM64
	}
	s := Sections{File: path, Arch: a}
	if section == ".eh_frame" {
		s.EHFrame, s.EHFrameAddr = data, sec.Addr
	} else {
		s.DebugFrame = data
	}
	tab, err := NewTable(s)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	rows, fdes := readelfRows(t, path, section)
	if len(rows) == 0 {
		t.Fatalf("readelf printed no rows for %s of %s", section, path)
	}
	bad := 0
	for _, o := range rows {
		if o.loc < o.start || o.loc >= o.end {
			continue // readelf prints rows set past the FDE's end
		}
		if err := checkRow(a, tab.Lookup(o.loc), o); err != nil {
			bad++
			if bad <= 10 {
				t.Errorf("%s: %s FDE %s pc=%#x..%#x row %#x: %v", path, section, o.fde, o.start, o.end, o.loc, err)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d rows differ from readelf", bad, len(rows))
	}
	if tab.FDEs+tab.Skipped < fdes {
		t.Errorf("table has %d FDEs (+%d skipped), readelf %d", tab.FDEs, tab.Skipped, fdes)
	}
	t.Logf("%s %s: %d readelf rows in %d FDEs match; table: %d rows, %d distinct rules, %d bytes, %d FDEs, %d skipped",
		path, section, len(rows), fdes, tab.Len(), tab.NumRules(), tab.Bytes(), tab.FDEs, tab.Skipped)
	return tab
}

func TestCFIMatchesReadelf(t *testing.T) {
	cases := []struct {
		name, cc, section string
		flags             []string
		path              string
		src               string // default deep.c
	}{
		{name: "amd64-O2-omitfp", cc: "gcc", section: ".eh_frame", flags: []string{"-O2", "-fomit-frame-pointer"}},
		{name: "amd64-O0-fp", cc: "gcc", section: ".eh_frame", flags: []string{"-O0", "-fno-omit-frame-pointer"}},
		{name: "amd64-debug_frame", cc: "gcc", section: ".debug_frame", flags: []string{"-O2", "-g", "-fno-asynchronous-unwind-tables", "-fomit-frame-pointer"}},
		{name: "amd64-clang", cc: "clang", section: ".eh_frame", flags: []string{"-O2", "-fomit-frame-pointer"}},
		{name: "amd64-g++", cc: "g++", section: ".eh_frame", flags: []string{"-O2", "-fomit-frame-pointer"}, src: "deep.cpp"},
		{name: "arm64-g++", cc: "aarch64-linux-gnu-g++", section: ".eh_frame", flags: []string{"-O2"}, src: "deep.cpp"},
		{name: "arm64-O2", cc: "aarch64-linux-gnu-gcc", section: ".eh_frame", flags: []string{"-O2", "-fomit-frame-pointer"}},
		{name: "arm64-pac", cc: "aarch64-linux-gnu-gcc", section: ".eh_frame", flags: []string{"-O2", "-mbranch-protection=standard"}},
		{name: "arm64-debug_frame", cc: "aarch64-linux-gnu-gcc", section: ".debug_frame", flags: []string{"-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables"}},
		{name: "libc", section: ".eh_frame", path: "/lib/x86_64-linux-gnu/libc.so.6"},
		{name: "arm64-libc", section: ".eh_frame", path: "/usr/aarch64-linux-gnu/lib/libc.so.6"},
		{name: "arm64-libstdc++", section: ".eh_frame", path: "/usr/aarch64-linux-gnu/lib/libstdc++.so.6"},
		{name: "go", section: ".debug_frame", path: "go"},
		{name: "libstdc++", section: ".eh_frame", path: "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.path
			if path == "go" {
				path = buildGo(t, "goprog")
			} else if path == "" {
				path = testbuild.CC(t, c.cc, "", []string{"testdata/" + cmp.Or(c.src, "deep.c")}, c.flags...)
			} else if _, err := elf.Open(path); err != nil {
				testbuild.Skip(t, "%s not present: %v", path, err)
			}
			compareWithReadelf(t, path, c.section)
		})
	}
}

// TestEHFrameViaSegments reads .eh_frame through PT_GNU_EH_FRAME, as for a
// file without section headers, and checks the table equals the one from
// the sections and that .eh_frame_hdr's FDE count equals the FDEs parsed.
func TestEHFrameViaSegments(t *testing.T) {
	paths := []string{testbuild.CC(t, "gcc", "", []string{"testdata/deep.c"}, "-O2", "-fomit-frame-pointer"), "/lib/x86_64-linux-gnu/libc.so.6"}
	for _, path := range paths {
		f, err := elf.Open(path)
		if err != nil {
			testbuild.Skip(t, "%s: %v", path, err)
		}
		want, err := NewTableELF(f, path)
		if err != nil {
			t.Fatal(err)
		}
		hs := f.Section(".eh_frame_hdr")
		hd, err := hs.Data()
		if err != nil {
			t.Fatal(err)
		}
		h, err := ParseEHFrameHdr(path, hd, hs.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if eh := f.Section(".eh_frame"); h.EHFrameAddr != eh.Addr {
			t.Errorf("%s: header says .eh_frame at %#x, section at %#x", path, h.EHFrameAddr, eh.Addr)
		}
		if h.FDECount != uint64(want.FDEs+want.Skipped) {
			t.Errorf("%s: header lists %d FDEs, parsed %d (+%d skipped)", path, h.FDECount, want.FDEs, want.Skipped)
		}
		f.Sections = nil // as if the section headers were stripped
		got, err := NewTableELF(f, path)
		f.Close()
		if err != nil {
			t.Fatalf("%s without sections: %v", path, err)
		}
		if got.Len() != want.Len() {
			t.Fatalf("%s: %d rows through segments, %d through sections", path, got.Len(), want.Len())
		}
		for i := 0; i < got.Len(); i++ {
			ga, gr := got.Row(i)
			wa, wr := want.Row(i)
			if ga != wa || gr != wr {
				t.Fatalf("%s row %d: %#x %v, want %#x %v", path, i, ga, gr, wa, wr)
			}
		}
		t.Logf("%s: %d rows, %d FDEs alike through PT_GNU_EH_FRAME", path, got.Len(), h.FDECount)
	}
}
