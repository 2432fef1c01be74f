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
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"unicode/utf8"

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
	off  uint32 // name in Table.names
	n    uint32
}

// Table is a sorted kernel symbol table. It implements symbolizer.Source.
type Table struct {
	syms  []sym
	names string // every kept name, back to back
}

// maxNames caps the bytes of kept names (offsets are 32-bit).
const maxNames = 1<<32 - 1

// Parse reads a kallsyms file; name is used in errors. Only text symbols
// (types t, T, w, W) are kept.
//
// /proc/kallsyms of a distribution kernel has over 100,000 lines and is
// read whenever a trace has kernel frames, so lines are split in place:
// names go into one shared buffer and the table holds no pointers, which
// makes parsing a handful of allocations and leaves the collector nothing
// to scan.
func Parse(r io.Reader, name string) (*Table, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	t := &Table{}
	var names []byte
	var f [4][]byte
	n, nonzero := 0, false
	for sc.Scan() {
		n++
		line := sc.Bytes()
		nf := fields(line, &f)
		if nf < 3 {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			return nil, &FormatError{name, n, "want ADDRESS TYPE NAME"}
		}
		addr, ok := parseHex(f[0])
		if !ok || len(f[1]) != 1 {
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
		start := len(names)
		names = append(names, f[2]...)
		if nf > 3 && len(f[3]) > 0 && f[3][0] == '[' {
			names = append(names, ' ')
			names = append(names, f[3]...)
		}
		if len(names) > maxNames {
			return nil, &FormatError{name, n, "names too long"}
		}
		t.syms = append(t.syms, sym{addr, uint32(start), uint32(len(names) - start)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kallsyms: %s:%d: %w", name, n+1, err)
	}
	if !nonzero && n > 0 {
		return nil, ErrHidden
	}
	t.names = string(names)
	// Stable: among symbols at one address the first listed wins. The
	// kernel lists its own symbols in address order, so usually there
	// is nothing to do.
	byAddr := func(a, b sym) int { return cmp.Compare(a.addr, b.addr) }
	if !slices.IsSortedFunc(t.syms, byAddr) {
		slices.SortStableFunc(t.syms, byAddr)
	}
	return t, nil
}

// fields stores up to the first four fields of line, split as
// strings.Fields splits, in f and returns how many there are (at most 4).
func fields(line []byte, f *[4][]byte) int {
	for _, c := range line {
		if c >= utf8.RuneSelf {
			// Unicode white space: leave it to strings.Fields.
			all := bytes.Fields(line)
			return copy(f[:], all)
		}
	}
	nf := 0
	for i := 0; i < len(line) && nf < len(f); {
		for i < len(line) && asciiSpace(line[i]) {
			i++
		}
		if i == len(line) {
			break
		}
		j := i
		for j < len(line) && !asciiSpace(line[j]) {
			j++
		}
		f[nf] = line[i:j]
		nf++
		i = j
	}
	return nf
}

func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// parseHex is strconv.ParseUint(s, 16, 64) without the string.
func parseHex(s []byte) (uint64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		if v>>60 != 0 {
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
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
	s := t.syms[i-1]
	return append(dst, symbolizer.Frame{Function: t.names[s.off : s.off+s.n]}), nil
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
