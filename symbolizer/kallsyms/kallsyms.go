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
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"sync"

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

// Table is a sorted kernel symbol table. It implements symbolizer.Source.
//
// The names are kept compressed: a distribution kernel has over 120,000
// text symbols and 3 MB of names, and a whole-host agent that names
// kernel frames holds its table for as long as it runs, while it looks
// up a few thousand of them. The names are stored blockNames a block, in
// the file's order, each block a flate stream of (uvarint length, bytes)
// pairs: about 0.8 MB for those 3 MB (issue 38: the agent's memory). A
// lookup inflates one block.
type Table struct {
	addrs addrIndex // sorted
	// ord is the file ordinal of the i-th address's name, or nil when
	// the file listed the symbols in address order (the kernel's own
	// order).
	ord    []uint32
	blocks []uint32 // where each block starts in z, and z's end
	z      []byte
}

// addrIndex holds a list of addresses compactly: per group of addrGroup,
// the first address, and the differences of the others to the one before
// them as zigzag varints. Kernel functions are a few hundred bytes apart,
// so /proc/kallsyms's 122,000 addresses take about 0.25 MB here where a
// []uint64 took 1 MB (issue 38: the agent's memory); a lookup decodes one
// group.
type addrIndex struct {
	n     int
	first []uint64 // the first address of each group
	off   []uint32 // where each group's differences start in d
	d     []byte
	last  uint64 // the address added last
}

const addrGroup = 64

func (x *addrIndex) add(a uint64) {
	if x.n%addrGroup == 0 {
		x.first = append(x.first, a)
		x.off = append(x.off, uint32(len(x.d)))
	} else {
		x.d = binary.AppendVarint(x.d, int64(a-x.last))
	}
	x.last = a
	x.n++
}

// group calls yield with the index and address of each entry of group g,
// in order, until yield returns false.
func (x *addrIndex) group(g int, yield func(i int, a uint64) bool) {
	a, d := x.first[g], x.d[x.off[g]:]
	for i := g * addrGroup; i < min(x.n, (g+1)*addrGroup); i++ {
		if i > g*addrGroup {
			v, k := binary.Varint(d)
			if k <= 0 {
				return // cannot happen: add wrote d
			}
			a, d = a+uint64(v), d[k:]
		}
		if !yield(i, a) {
			return
		}
	}
}

// search returns the index of the first of the entries at the greatest
// address at or below addr (the first listed wins among symbols at one
// address), or -1 when every address is above addr. x must be sorted.
func (x *addrIndex) search(addr uint64) int {
	g := sort.Search(len(x.first), func(g int) bool { return x.first[g] > addr }) - 1
	if g < 0 {
		return -1
	}
	at, v := -1, uint64(0)
	x.group(g, func(i int, a uint64) bool {
		if a > addr {
			return false
		}
		if at < 0 || a != v {
			at, v = i, a
		}
		return true
	})
	// Symbols at one address may begin in an earlier group.
	for at == g*addrGroup && g > 0 {
		g--
		x.group(g, func(i int, a uint64) bool {
			if a == v {
				at = i
				return false
			}
			return true
		})
	}
	return at
}

// clip returns b without spare capacity worth copying it for.
func clip[E any](b []E) []E {
	if cap(b)-len(b) > len(b)/8 {
		return slices.Clone(b)
	}
	return b
}

// blockNames is the number of names a compressed block holds. On Debian
// 12's /proc/kallsyms (122,000 text symbols, 3.1 MB of names), 256 a
// block at flate's best speed keep 0.76 MB and a lookup inflates one
// block in about 35 µs (symbolizer.Resolver caches each address's
// answer); parsing takes 80 ms where keeping the names plain took 50.
// 64 a block kept 0.86 MB and took 120 ms: each block resets the
// compressor.
const blockNames = 256

// maxNames caps the compressed bytes of names (offsets are 32-bit).
const maxNames = 1<<32 - 1

// Parse reads a kallsyms file; name is used in errors. Only text symbols
// (types t, T, w, W) are kept.
//
// /proc/kallsyms of a distribution kernel has over 100,000 lines and is
// read whenever a trace has kernel frames, so lines are split in place
// and names compressed as they come: the table holds no pointers, which
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
	t := &Table{blocks: make([]uint32, 0, lines/blockNames+2)}
	t.addrs.first = make([]uint64, 0, lines/addrGroup+1)
	t.addrs.off = make([]uint32, 0, lines/addrGroup+1)
	t.addrs.d = make([]byte, 0, 2*lines)           // about 1.9 bytes an address
	z := bytes.NewBuffer(make([]byte, 0, 7*lines)) // about 6.3 compressed bytes a name
	zw, _ := flate.NewWriter(z, flate.BestSpeed)
	var blk []byte // the current block, uncompressed
	flush := func() error {
		if len(blk) == 0 {
			return nil
		}
		t.blocks = append(t.blocks, uint32(z.Len()))
		zw.Reset(z)
		zw.Write(blk)
		if err := zw.Close(); err != nil {
			return err
		}
		blk = blk[:0]
		if uint64(z.Len()) > maxNames {
			return errors.New("names too long")
		}
		return nil
	}
	var f [4][]byte
	n, nonzero, sorted := 0, false, true
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
		if t.addrs.n >= maxSymbols {
			return nil, &FormatError{name, n, "too many symbols"}
		}
		mod := nf > 3 && len(f[3]) > 0 && f[3][0] == '['
		size := len(f[2])
		if mod {
			size += 1 + len(f[3])
		}
		blk = binary.AppendUvarint(blk, uint64(size))
		blk = append(blk, f[2]...)
		if mod {
			blk = append(blk, ' ')
			blk = append(blk, f[3]...)
		}
		if t.addrs.n > 0 && t.addrs.last > addr {
			sorted = false
		}
		t.addrs.add(addr)
		if t.addrs.n%blockNames == 0 {
			if err := flush(); err != nil {
				return nil, &FormatError{name, n, err.Error()}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kallsyms: %s:%d: %w", name, n+1, err)
	}
	if !nonzero && n > 0 {
		return nil, ErrHidden
	}
	if err := flush(); err != nil {
		return nil, &FormatError{name, n, err.Error()}
	}
	t.blocks = append(t.blocks, uint32(z.Len()))
	t.z = clip(z.Bytes())
	// Stable: among symbols at one address the first listed wins. The
	// kernel lists its own symbols in address order, so usually there
	// is nothing to do.
	if !sorted {
		addrs := make([]uint64, t.addrs.n)
		for g := range t.addrs.first {
			t.addrs.group(g, func(i int, a uint64) bool { addrs[i] = a; return true })
		}
		t.ord = make([]uint32, len(addrs))
		for i := range t.ord {
			t.ord[i] = uint32(i)
		}
		slices.SortStableFunc(t.ord, func(a, b uint32) int { return cmp.Compare(addrs[a], addrs[b]) })
		var x addrIndex
		for _, o := range t.ord {
			x.add(addrs[o])
		}
		t.addrs = x
	}
	t.addrs.first, t.addrs.off, t.addrs.d = clip(t.addrs.first), clip(t.addrs.off), clip(t.addrs.d)
	return t, nil
}

// inflaters keeps the decompressors of lookups (about 40 KB each).
var inflaters sync.Pool

// name returns the name of the i-th address.
func (t *Table) name(i int) (string, error) {
	o := i
	if t.ord != nil {
		o = int(t.ord[i])
	}
	b := o / blockNames
	src := bytes.NewReader(t.z[t.blocks[b]:t.blocks[b+1]])
	zr, _ := inflaters.Get().(io.ReadCloser)
	if zr == nil {
		zr = flate.NewReader(src)
	} else {
		zr.(flate.Resetter).Reset(src, nil)
	}
	defer inflaters.Put(zr)
	br := bufio.NewReaderSize(zr, 512)
	for k := o % blockNames; ; k-- {
		size, err := binary.ReadUvarint(br)
		if err != nil || size > maxLine {
			return "", fmt.Errorf("kallsyms: names block %d: %v", b, err)
		}
		if k == 0 {
			s := make([]byte, size)
			if _, err := io.ReadFull(br, s); err != nil {
				return "", fmt.Errorf("kallsyms: names block %d: %v", b, err)
			}
			return string(s), nil
		}
		if _, err := br.Discard(int(size)); err != nil {
			return "", fmt.Errorf("kallsyms: names block %d: %v", b, err)
		}
	}
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
	i := t.addrs.search(addr)
	if i < 0 {
		return dst, nil
	}
	name, err := t.name(i)
	if err != nil {
		return dst, err
	}
	return append(dst, symbolizer.Frame{Function: name}), nil
}

// Close implements symbolizer.Source.
func (t *Table) Close() error { return nil }

// Len returns the number of text symbols.
func (t *Table) Len() int { return t.addrs.n }

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
