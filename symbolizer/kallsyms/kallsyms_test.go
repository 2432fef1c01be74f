package kallsyms

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
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
		t.Skipf("no kernel notes: %v", err)
	}
	id := locate.NoteBuildID(notes, binary.NativeEndian)
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Skipf("no /proc/kallsyms: %v", err)
	}
	tab, err := Parse(bytes.NewReader(data), "/proc/kallsyms")
	if errors.Is(err, ErrHidden) {
		t.Skip("kallsyms addresses hidden from this user")
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
	fr, _ := o.Source.Symbolize(tab.syms[len(tab.syms)/2].addr+1, nil)
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
		if err != nil {
			return
		}
		tab.Symbolize(addr, nil)
	})
}
