// Package kallsyms symbolizes kernel addresses with a kernel symbol table
// in the format of /proc/kallsyms ("ffffffff81000080 T entry_SYSCALL_64",
// optionally followed by "\t[module]").
//
// A kallsyms file names the addresses of one boot (KASLR moves them), so
// the opener it registers for kernel modules uses /proc/kallsyms only when
// the kernel recorded in the stream has the build id of the running kernel
// (/sys/kernel/notes) — symbolizing on the machine that recorded, before
// a reboot is the case it serves — or a file given in Options.Kallsyms.
package kallsyms

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/locate"
)

// Limits on what is read.
const (
	maxSymbols = 1 << 23
	maxLine    = 4096
)

// ErrHidden says every address in the file is zero: kptr_restrict hides
// them from this user.
var ErrHidden = errors.New("kallsyms: addresses are hidden (kptr_restrict); read the file as root")

// FormatError names the line of a malformed file.
type FormatError struct {
	Name string
	Line int
	Msg  string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("kallsyms: %s:%d: %s", e.Name, e.Line, e.Msg)
}

type sym struct {
	addr uint64
	name string
}

// Table is a sorted kernel symbol table. It implements symbolizer.Source.
type Table struct {
	syms []sym
}

// Parse reads a kallsyms file; name is used in errors. Only text symbols
// (types t, T, w, W) are kept.
func Parse(r io.Reader, name string) (*Table, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	t := &Table{}
	n, nonzero := 0, false
	for sc.Scan() {
		n++
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 3 {
			if strings.TrimSpace(line) == "" {
				continue
			}
			return nil, &FormatError{name, n, "want ADDRESS TYPE NAME"}
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil || len(f[1]) != 1 {
			return nil, &FormatError{name, n, fmt.Sprintf("bad address or type in %q", line)}
		}
		if addr != 0 {
			nonzero = true
		}
		switch f[1][0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		if len(t.syms) >= maxSymbols {
			return nil, &FormatError{name, n, "too many symbols"}
		}
		s := f[2]
		if len(f) > 3 && strings.HasPrefix(f[3], "[") {
			s += " " + f[3]
		}
		t.syms = append(t.syms, sym{addr, s})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kallsyms: %s:%d: %w", name, n+1, err)
	}
	if !nonzero && n > 0 {
		return nil, ErrHidden
	}
	// Stable: among symbols at one address the first listed wins.
	sort.SliceStable(t.syms, func(i, j int) bool { return t.syms[i].addr < t.syms[j].addr })
	return t, nil
}

// Symbolize implements symbolizer.Source: the function is the last text
// symbol at or below addr (kallsyms has no sizes).
func (t *Table) Symbolize(addr uint64, dst []symbolizer.Frame) ([]symbolizer.Frame, error) {
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].addr > addr })
	if i == 0 {
		return dst, nil
	}
	for i > 1 && t.syms[i-2].addr == t.syms[i-1].addr {
		i--
	}
	return append(dst, symbolizer.Frame{Function: t.syms[i-1].name}), nil
}

// Close implements symbolizer.Source.
func (t *Table) Close() error { return nil }

// Len returns the number of text symbols.
func (t *Table) Len() int { return len(t.syms) }

func init() { symbolizer.RegisterOpener(format.ModuleKernel, OpenModule) }

// OpenModule opens the symbol table for a recorded kernel: opts.Kallsyms
// if set, else /proc/kallsyms when the running kernel's build id is the
// recorded one.
func OpenModule(m *symbolizer.Module, opts *symbolizer.Options) (*symbolizer.Opened, error) {
	path := opts.Kallsyms
	if path == "" {
		if len(m.BuildID) == 0 {
			return nil, errors.New("kallsyms: the recorded kernel has no build id; pass a kallsyms file")
		}
		notes, err := os.ReadFile("/sys/kernel/notes")
		if err != nil {
			return nil, fmt.Errorf("kallsyms: %w", err)
		}
		if id := locate.NoteBuildID(notes, binary.NativeEndian); string(id) != string(m.BuildID) {
			return nil, fmt.Errorf("kallsyms: running kernel build id %x is not the recorded %x", id, m.BuildID)
		}
		path = "/proc/kallsyms"
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kallsyms: %w", err)
	}
	defer f.Close()
	t, err := Parse(f, path)
	if err != nil {
		return nil, err
	}
	return &symbolizer.Opened{Source: t, Path: path}, nil
}
