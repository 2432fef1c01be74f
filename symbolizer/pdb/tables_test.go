package pdb

import (
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

func pdbutil(t *testing.T, args ...string) string {
	t.Helper()
	testbuild.Need(t, "llvm-pdbutil", "the oracle of the PDB tables")
	out, err := exec.Command("llvm-pdbutil", args...).Output()
	if err != nil {
		t.Fatalf("llvm-pdbutil %v: %v", args, err)
	}
	return string(out)
}

func atoi(t *testing.T, s string, base int) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, base, 64)
	if err != nil {
		t.Fatalf("parsing %q: %v", s, err)
	}
	return v
}

// TestTablesAgainstPDBUtil compares the reader's tables with
// llvm-pdbutil dump: summary, modules, section contributions, section
// headers, the /names string table, publics and inlinee lines.
func TestTablesAgainstPDBUtil(t *testing.T) {
	for _, kind := range fixtureKinds {
		t.Run(kind, func(t *testing.T) {
			fx := buildFixture(t, kind)
			f, err := Open(fx.pdb)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()

			sum := pdbutil(t, "dump", "-summary", fx.pdb)
			g := f.GUID
			guid := fmt.Sprintf("{%08X-%04X-%04X-%X-%X}", le32(g[0:]), le16(g[4:]), le16(g[6:]), g[8:10], g[10:16])
			if !strings.Contains(sum, "GUID: "+guid) || !strings.Contains(sum, fmt.Sprintf("Age: %d\n", f.Age)) {
				t.Errorf("GUID %s age %d not in summary:\n%s", guid, f.Age, sum)
			}

			mods := pdbutil(t, "dump", "-modules", fx.pdb)
			re := regexp.MustCompile("Mod (\\d+) \\| `([^`]*)`:\\s+Obj: `([^`]*)`:\\s+debug stream: (\\d+)")
			ms := re.FindAllStringSubmatch(mods, -1)
			if len(ms) != len(f.Modules) || len(ms) == 0 {
				t.Fatalf("%d modules, llvm-pdbutil %d", len(f.Modules), len(ms))
			}
			for i, m := range ms {
				got := f.Modules[i]
				stream := int(atoi(t, m[4], 10))
				if stream == 65535 {
					stream = -1
				}
				if got.Name != m[2] || got.ObjName != m[3] || got.SymStream != stream {
					t.Errorf("module %d: got %+v, llvm-pdbutil %q %q stream %d", i, got, m[2], m[3], stream)
				}
			}

			scs := regexp.MustCompile(`mod = (\d+), (\d+):(\d+), size = (\d+)`).FindAllStringSubmatch(pdbutil(t, "dump", "-section-contribs", fx.pdb), -1)
			if len(scs) != len(f.Contribs) {
				t.Fatalf("%d section contributions, llvm-pdbutil %d", len(f.Contribs), len(scs))
			}
			for i, m := range scs {
				c := f.Contribs[i]
				if uint64(c.Module) != atoi(t, m[1], 10) || uint64(c.Section) != atoi(t, m[2], 10) ||
					uint64(c.Offset) != atoi(t, m[3], 10) || uint64(c.Size) != atoi(t, m[4], 10) {
					t.Errorf("contribution %d: got %+v, llvm-pdbutil %v", i, c, m[1:])
				}
			}

			shs := regexp.MustCompile(`(\S+) name\s+([0-9A-F]+) virtual size\s+([0-9A-F]+) virtual address`).FindAllStringSubmatch(pdbutil(t, "dump", "-section-headers", fx.pdb), -1)
			if len(shs) != len(f.Sections) {
				t.Fatalf("%d section headers, llvm-pdbutil %d", len(f.Sections), len(shs))
			}
			for i, m := range shs {
				s := f.Sections[i]
				// llvm-pdbutil 14 prints bytes past an 8-character name
				// that has no terminating NUL (".buildidw").
				nameOK := s.Name == m[1] || len(s.Name) == 8 && strings.HasPrefix(m[1], s.Name)
				if !nameOK || uint64(s.VirtualSize) != atoi(t, m[2], 16) || uint64(s.VirtualAddress) != atoi(t, m[3], 16) {
					t.Errorf("section %d: got %+v, llvm-pdbutil %v", i, s, m[1:])
				}
			}

			strs := regexp.MustCompile(`(?m)^\s+(\d+) \| '(.*)'$`).FindAllStringSubmatch(pdbutil(t, "dump", "-string-table", fx.pdb), -1)
			if len(strs) == 0 {
				t.Fatal("llvm-pdbutil printed no strings")
			}
			for _, m := range strs {
				s, err := f.Name(uint32(atoi(t, m[1], 10)))
				if err != nil || s != m[2] {
					t.Errorf("/names %s: got %q, %v; want %q", m[1], s, err, m[2])
				}
			}

			pubs, err := f.publicSymbols()
			if err != nil {
				t.Fatal(err)
			}
			var got, want []string
			for i := range pubs.rvas {
				got = append(got, fmt.Sprintf("%s@%#x", pubs.name(i), pubs.rvas[i]))
			}
			for _, m := range regexp.MustCompile("S_PUB32 \\[size = \\d+\\] `([^`]*)`\\s+flags = [^\n]*addr = (\\d+):(\\d+)").FindAllStringSubmatch(pdbutil(t, "dump", "-publics", fx.pdb), -1) {
				rva, ok := f.sectRVA(uint16(atoi(t, m[2], 10)), uint32(atoi(t, m[3], 10)))
				if !ok {
					continue // publics outside any section (absolute symbols)
				}
				want = append(want, fmt.Sprintf("%s@%#x", m[1], rva))
			}
			sort.Strings(got)
			sort.Strings(want)
			if len(want) == 0 || strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("publics differ:\n got  %v\n want %v", got, want)
			}

			// Inlinee lines, module by module.
			il := pdbutil(t, "dump", "-il", fx.pdb)
			checked := 0
			for _, blk := range strings.Split(il, "Mod ")[1:] {
				mi := int(atoi(t, blk[:4], 10))
				if f.Modules[mi].SymStream < 0 {
					// llvm-pdbutil 14 repeats the previous module's table
					// for a module without a stream.
					continue
				}
				m, err := f.module(mi)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range regexp.MustCompile(`0x([0-9A-F]+) \|\s+(\d+) \| (\S+)`).FindAllStringSubmatch(blk, -1) {
					in, ok := m.inlinees[uint32(atoi(t, e[1], 16))]
					file, _ := f.chksumFile(m, in.file)
					if !ok || uint64(in.line) != atoi(t, e[2], 10) || file != e[3] {
						t.Errorf("module %d inlinee %s: got %+v %q, llvm-pdbutil line %s file %s", mi, e[1], in, file, e[2], e[3])
					}
					checked++
				}
			}
			if checked == 0 {
				t.Error("no inlinee lines compared")
			}
			t.Logf("%d modules, %d contributions, %d sections, %d strings, %d publics, %d inlinees agree", len(ms), len(scs), len(shs), len(strs), len(want), checked)
		})
	}
}
