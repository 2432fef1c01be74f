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
	names []byte // every kept name, back to back
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
	return parse(r, name, 0)
}

// procLines is the number of lines parse expects of /proc/kallsyms (whose
// size stat does not tell): about 120,000 on Debian 12.
const procLines = 1 << 17

// parse is Parse with room for about lines lines made at once: growing
// the table by appends copied it into fresh memory a dozen times, a third
// of the time parsing took.
func parse(r io.Reader, name string, lines int) (*Table, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	lines = min(lines, maxSymbols)
	t := &Table{syms: make([]sym, 0, lines)}
	names := make([]byte, 0, 26*lines) // average name and separator: 25 bytes
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
	t.names = names
	// Stable: among symbols at one address the first listed wins. The
	// kernel lists its own symbols in address order, so usually there
	// is nothing to do.
	byAddr := func(a, b sym) int { return cmp.Compare(a.addr, b.addr) }
	if !slices.IsSortedFunc(t.syms, byAddr) {
		slices.SortStableFunc(t.syms, byAddr)
	}
	return t, nil
}

// Byte classes of fields and parseHex.
const (
	cOther = iota
	cSpace // ASCII white space, as unicode.IsSpace has it
	cHigh  // not ASCII: maybe part of a Unicode space
)

// The byte tables of fields (class) and parseHex (hexVal: digit value + 1,
// 0 if not a hex digit) are string constants, read-only data that needs
// no init work at start-up; TestByteTables checks them against their
// definition.
const class = "" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x01\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02" +
	"\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02" +
	"\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02" +
	"\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02\x02"

const hexVal = "" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x00\x00\x00\x00\x00\x00" +
	"\x00\x0b\x0c\x0d\x0e\x0f\x10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x0b\x0c\x0d\x0e\x0f\x10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// fields stores up to the first four fields of line, split as
// strings.Fields splits, in f and returns how many there are (at most 4).
func fields(line []byte, f *[4][]byte) int {
	nf, start := 0, -1
	for i, c := range line {
		switch class[c] {
		case cOther:
			if start < 0 {
				start = i
			}
		case cSpace:
			if start >= 0 {
				if nf < len(f) {
					f[nf] = line[start:i]
				}
				nf++
				start = -1
			}
		default:
			// Unicode white space: leave it to bytes.Fields.
			return copy(f[:], bytes.Fields(line))
		}
	}
	if start >= 0 {
		if nf < len(f) {
			f[nf] = line[start:]
		}
		nf++
	}
	return min(nf, len(f))
}

// parseHex is strconv.ParseUint(s, 16, 64) without the string.
func parseHex(s []byte) (uint64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		d := hexVal[c]
		if d == 0 || v>>60 != 0 {
			return 0, false
		}
		v = v<<4 | uint64(d-1)
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
	return append(dst, symbolizer.Frame{Function: string(t.names[s.off : s.off+s.n])}), nil
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
	lines := procLines
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		lines = int(min(st.Size()/40, maxSymbols)) // 40 bytes a line
	}
	t, err := parse(f, path, lines)
	if err != nil {
		return nil, err
	}
	return &symbolizer.Opened{Source: t, Path: path}, nil
}
