// Package elfsrc symbolizes addresses of ELF modules from their symbol
// tables (.symtab, else .dynsym) and DWARF debug information: line tables
// of DWARF 2–5 and chains of DW_TAG_inlined_subroutine, compressed debug
// sections included.
//
// Debug information entries are read by a small reader of its own
// (die.go) rather than debug/dwarf's Reader (which delve's pkg/dwarf
// builds on too): it decodes every attribute of every entry into
// allocated interface values, and building the inline
// tree of a large C++ unit that way cost more than llvm-symbolizer's whole
// run; this reader precomputes abbreviations, skips fixed-size entries in
// one step and decodes only the attributes of subroutines (all DWARF 5
// forms: strx, addrx, rnglistx, implicit_const; DWARF 4 and 5 range
// lists). Line tables are decoded by [dwarfline], which keeps file names
// byte-exact (debug/dwarf's line reader cleans paths). Compressed sections
// (SHF_COMPRESSED zlib and zstd, GNU .zdebug) are decompressed once, only
// those symbolization reads, in parallel; a compressed .debug_info only as
// far as the units holding the addresses asked for. Go binaries without DWARF are
// read through their runtime tables ([gopclntab]), inline tree included.
//
// Answers follow llvm-symbolizer's rules (see [Source.Symbolize]), so that
// both tools print the same frames for the same address.
package elfsrc

import (
	"bytes"
	"cmp"
	"compress/zlib"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/rawstack/rawstack/internal/gopclntab"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/dwarfline"
)

// Source symbolizes one ELF file. It is safe for concurrent use.
type Source struct {
	path   string
	closer io.Closer
	f      *elf.File
	syms   symtab // from the symbol file (the binary)

	noDemangle bool
	dir0       bool                // join file names as llvm-symbolizer 19 (dwarfline.Table.FileNameDir0)
	demangleFn func(string) string // the container's demangler (NewDWARF); nil: Itanium and Rust
	gopcln     *gopclntab.Table    // Go runtime tables, used without DWARF

	hasDWARF    bool // the file has debug information entries
	abbrevMu    sync.Mutex
	abbrevCache map[uint64]*abbrevTable
	lines       dwarfline.Sections
	lineZ       *stream   // a compressed .debug_line, read as far as needed
	secs        dwarfSecs // sections the fast DIE reader uses
	demangled   sync.Map  // mangled name → demangled name

	// The unit index grows as lookups need it (see unitFor), so that a
	// compressed .debug_info is decompressed only as far as the units
	// asked for: libc6-dbg's is 6 MB and a trace rarely needs more than
	// a few of its first units. idxMu guards everything below.
	idxMu     sync.Mutex
	infoR     io.Reader // rest of a compressed .debug_info; nil once read
	infoHave  uint64    // bytes of secs.info decompressed
	idxOff    uint64    // offset of the next unit header to index
	idxDone   bool
	idxTabs   map[[2]uint64]*abbrevTable // unit DIE abbreviations by table offset, code
	cus       []*unit                    // indexed units in section order
	allRanges []cuRange                  // their ranges, in unit order
	dirty     bool                       // cuRanges is older than allRanges
	// cuRanges maps addresses to indexed units, sorted by lo,
	// non-overlapping.
	cuRanges []cuRange
}

type cuRange struct {
	lo, hi uint64
	cu     *unit
}

// Options tune Open.
type Options struct {
	// DebugFile, if set, is a separate file holding the DWARF of the
	// binary (a .debug file found by build id or debuglink). Symbols still
	// come from the binary, as llvm-symbolizer takes them.
	DebugFile string
	// NoDemangle keeps function names as the debug information and the
	// symbol table spell them (llvm-symbolizer --no-demangle).
	NoDemangle bool
	// NoDWARF names functions from the symbol table (and a Go binary's
	// pclntab) alone, reading no DWARF: no lines, no inlined frames, and
	// none of the tables a binary's DWARF needs in memory
	// (symbolizer.Options.SymbolsOnly).
	NoDWARF bool
}

// Open opens the ELF file at path.
func Open(path string, opts *Options) (*Source, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("elfsrc: %w", err)
	}
	s := &Source{path: path, closer: f, f: f}
	s.noDemangle = opts != nil && opts.NoDemangle
	// The symbol table loads while the debug sections decompress.
	symsDone := make(chan struct{})
	go func() {
		s.syms = loadSymtab(f)
		close(symsDone)
	}()
	defer func() { <-symsDone }()
	dbg := f
	var dbgCloser io.Closer
	if opts != nil && opts.DebugFile != "" {
		df, err := elf.Open(opts.DebugFile)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("elfsrc: debug file: %w", err)
		}
		dbg, dbgCloser = df, df
	}
	if opts != nil && opts.NoDWARF {
		s.initGo(f)
		return s, nil
	}
	if err := s.initDWARF(dbg); err != nil {
		f.Close()
		if dbgCloser != nil {
			dbgCloser.Close()
		}
		return nil, fmt.Errorf("elfsrc: %s: %w", path, err)
	}
	if dbgCloser != nil {
		s.closer = multiCloser{f, dbgCloser}
	}
	if !s.hasDWARF {
		s.initGo(f)
	}
	return s, nil
}

// NewFile symbolizes an ELF file read through r; name is used in errors.
func NewFile(r io.ReaderAt, name string) (*Source, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("elfsrc: %s: %w", name, err)
	}
	s := &Source{path: name, f: f}
	s.syms = loadSymtab(f)
	if err := s.initDWARF(f); err != nil {
		return nil, fmt.Errorf("elfsrc: %s: %w", name, err)
	}
	if !s.hasDWARF {
		s.initGo(f)
	}
	return s, nil
}

type multiCloser []io.Closer

func (m multiCloser) Close() error {
	var first error
	for _, c := range m {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close releases the file.
func (s *Source) Close() error {
	if s.closer == nil {
		return nil
	}
	return s.closer.Close()
}

// HasDWARF reports whether the source found debug information entries.
func (s *Source) HasDWARF() bool { return s.hasDWARF }

// maxDebugSection caps the decompressed size of a .zdebug section.
const maxDebugSection = 1 << 32

func sectionData(f *elf.File, name string) ([]byte, error) {
	sec := f.Section(name)
	if sec == nil && strings.HasPrefix(name, ".debug_") {
		if z := f.Section(".zdebug_" + name[len(".debug_"):]); z != nil && z.Type != elf.SHT_NOBITS {
			raw, err := z.Data()
			if err != nil {
				return nil, err
			}
			return gnuDecompress(z.Name, raw)
		}
	}
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	return sec.Data()
}

// gnuDecompress decompresses a GNU-style compressed section (.zdebug_*):
// "ZLIB", an 8-byte big-endian size, zlib data. Data without the header
// is returned as it is.
func gnuDecompress(name string, raw []byte) ([]byte, error) {
	if len(raw) < 12 || string(raw[:4]) != "ZLIB" {
		return raw, nil
	}
	size := binary.BigEndian.Uint64(raw[4:])
	if size > maxDebugSection {
		return nil, fmt.Errorf("section %s: decompressed size %d too large", name, size)
	}
	zr, err := zlib.NewReader(bytes.NewReader(raw[12:]))
	if err != nil {
		return nil, fmt.Errorf("section %s: %w", name, err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, int64(size)))
	if err != nil {
		return nil, fmt.Errorf("section %s: %w", name, err)
	}
	return out, nil
}

// dwarfNames are the sections symbolization reads (not location lists,
// frames or names); the indexes below name them.
var dwarfNames = [...]string{".debug_abbrev", ".debug_info", ".debug_line", ".debug_str", ".debug_ranges",
	".debug_line_str", ".debug_addr", ".debug_str_offsets", ".debug_rnglists", ".debug_aranges"}

const (
	secAbbrev = iota
	secInfo
	secLine
	secStr
	secRanges
	secLineStr
	secAddr
	secStrOffsets
	secRnglists
)

func (s *Source) initDWARF(f *elf.File) error {
	if sec := f.Section(".debug_info"); sec == nil || sec.Type == elf.SHT_NOBITS {
		if f.Section(".zdebug_info") == nil {
			return nil
		}
	}
	var data [len(dwarfNames)][]byte
	var lazy [len(dwarfNames)]bool
	for _, i := range []int{secInfo, secLine} {
		if sec := f.Section(dwarfNames[i]); sec != nil && lazyInfo(sec) {
			// Decompressed on demand, see ensureInfo and ensureLine:
			// units are read from the start.
			data[i], lazy[i] = make([]byte, sec.Size), true
			if i == secInfo {
				s.infoR = sec.Open()
			} else {
				s.lineZ = &stream{buf: data[i], r: sec.Open()}
			}
		}
	}
	// Unlinked objects (ET_REL) are read as they are: their string
	// offsets are unrelocated, so names may be wrong; linked files, the
	// symbolizer's input, are exact.
	return s.loadDWARF(&data, &lazy, f.ByteOrder, func(name string) ([]byte, error) { return sectionData(f, name) })
}

// loadDWARF reads the sections not marked lazy with get, each once, on
// parallel goroutines (for compressed debug files decompression is most
// of the start-up time), and makes them the Source's.
func (s *Source) loadDWARF(data *[len(dwarfNames)][]byte, lazy *[len(dwarfNames)]bool, order binary.ByteOrder, get func(name string) ([]byte, error)) error {
	var errs [len(dwarfNames)]error
	var wg sync.WaitGroup
	for i, n := range dwarfNames {
		if lazy[i] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			data[i], errs[i] = get(n)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("section %s: %w", dwarfNames[i], err)
		}
	}
	s.hasDWARF = true
	s.lines = dwarfline.Sections{Line: data[secLine], LineStr: data[secLineStr], Str: data[secStr]}
	s.secs = dwarfSecs{info: data[secInfo], abbrev: data[secAbbrev], str: data[secStr], lineStr: data[secLineStr], strOffsets: data[secStrOffsets],
		addr: data[secAddr], ranges: data[secRanges], rnglists: data[secRnglists], order: order}
	if s.infoR == nil {
		s.infoHave = uint64(len(data[secInfo]))
	}
	return nil
}

// maxLazyInfo caps the size of a .debug_info decompressed on demand into
// one buffer; larger (or implausibly compressed) sections are read whole.
const maxLazyInfo = 1 << 30

func lazyInfo(sec *elf.Section) bool {
	return sec.Type != elf.SHT_NOBITS && sec.Flags&elf.SHF_COMPRESSED != 0 &&
		sec.Size <= maxLazyInfo && sec.Size/1024 <= sec.FileSize
}

// stream is a compressed section decompressed on demand, from its start,
// into buf (its whole size).
type stream struct {
	mu   sync.Mutex
	buf  []byte
	have uint64    // bytes of buf decompressed
	r    io.Reader // the rest; nil once read
}

// ensure decompresses the section up to n bytes if it can and returns
// how many bytes are available.
func (z *stream) ensure(n uint64) uint64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	n = min(n, uint64(len(z.buf)))
	if n <= z.have || z.r == nil {
		return z.have
	}
	end := min(uint64(len(z.buf)), max(n, z.have+256<<10))
	k, err := io.ReadFull(z.r, z.buf[z.have:end])
	z.have += uint64(k)
	if err != nil || z.have == uint64(len(z.buf)) {
		z.r = nil
	}
	return z.have
}

// ensureLine decompresses .debug_line through the line program at off
// (dwarfline.Parse reads nothing past its unit length) and returns the
// sections to parse it from.
func (s *Source) ensureLine(off uint64, order binary.ByteOrder) dwarfline.Sections {
	secs := s.lines
	z := s.lineZ
	if z == nil {
		return secs
	}
	have := z.ensure(off + 12)
	end := uint64(len(z.buf))
	if off+4 <= have {
		if length := uint64(order.Uint32(z.buf[off:])); length != 0xffffffff {
			end = off + 4 + length
		} else if off+12 <= have {
			end = off + 12 + order.Uint64(z.buf[off+4:])
		}
	}
	if end < off {
		end = uint64(len(z.buf))
	}
	secs.Line = z.buf[:z.ensure(end)]
	return secs
}

// ensureInfo decompresses .debug_info up to n bytes if it can and returns
// how many bytes are available. Called with idxMu held.
func (s *Source) ensureInfo(n uint64) uint64 {
	info := s.secs.info
	n = min(n, uint64(len(info)))
	if n <= s.infoHave || s.infoR == nil {
		return s.infoHave
	}
	// Read ahead in large steps: the stream is sequential.
	end := min(uint64(len(info)), max(n, s.infoHave+256<<10))
	k, err := io.ReadFull(s.infoR, info[s.infoHave:end])
	s.infoHave += uint64(k)
	if err != nil || s.infoHave == uint64(len(info)) {
		// A stream that fails ends the section where it failed.
		s.infoR = nil
	}
	return s.infoHave
}

// unit is one compile unit; its tables are built on first use.
type unit struct {
	off      dwarf.Offset // offset of the unit's DIE
	compDir  string
	stmt     int64 // DW_AT_stmt_list, -1 if none
	addrSize int
	hdr      unitHdr

	once  sync.Once
	err   error
	lines *dwarfline.Table

	namesMu sync.Mutex
	names   map[uint64]fileName // joined file names by index
	tree    *inlineTree
}

// indexUnits indexes every unit of info, read whole.
func (s *Source) indexUnits(info []byte, order binary.ByteOrder) error {
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	s.secs.info, s.secs.order, s.infoR, s.infoHave = info, order, nil, uint64(len(info))
	for s.indexNext() != nil {
	}
	s.cuRanges, s.dirty = mergeRanges(s.allRanges), false
	return nil
}

// indexNext indexes the next unit with a unit DIE and returns it, or nil
// at the end of the section. Only the unit header and the first DIE are
// read. Called with idxMu held.
func (s *Source) indexNext() *unit {
	order := s.secs.order
	for !s.idxDone {
		off := s.idxOff
		info := s.secs.info[:s.ensureInfo(off+12)]
		if off+11 > uint64(len(info)) {
			break
		}
		length := uint64(order.Uint32(info[off:]))
		hdr := uint64(4)
		offSize := uint64(4)
		if length == 0xffffffff {
			if off+12 > uint64(len(info)) {
				break
			}
			length = order.Uint64(info[off+4:])
			hdr, offSize = 12, 8
		}
		next := off + hdr + length
		if next >= off {
			info = s.secs.info[:s.ensureInfo(next)]
		}
		if length < 7 || next > uint64(len(info)) || next < off {
			break
		}
		vers := order.Uint16(info[off+hdr:])
		start := off
		dieOff := off + hdr + 2 + offSize + 1 // v2–4: abbrev offset, address size
		abbrevOff := readOff(info[off+hdr+2:], offSize, order)
		addrSize := int(info[off+hdr+2+offSize])
		if vers >= 5 {
			if off+hdr+4+offSize > uint64(len(info)) {
				break
			}
			addrSize = int(info[off+hdr+3])
			abbrevOff = readOff(info[off+hdr+4:], offSize, order)
			dieOff = off + hdr + 2 + 2 + offSize // unit type, address size, abbrev offset
			switch info[off+hdr+2] {
			case 2, 6: // type, split type unit
				dieOff += 8 + offSize
			case 4, 5: // skeleton, split compile unit
				dieOff += 8
			}
		}
		s.idxOff = next
		if dieOff >= next || vers < 2 || vers > 5 || (addrSize != 4 && addrSize != 8) {
			continue
		}
		u := &unit{off: dwarf.Offset(dieOff), stmt: -1, addrSize: addrSize}
		u.hdr = unitHdr{start: start, end: next, die: dieOff, version: vers, addrSize: addrSize, offSize: int(offSize), abbrevOff: abbrevOff}
		code := (&dieBuf{b: info[:next], off: int(dieOff), bo: order}).uleb()
		key := [2]uint64{abbrevOff, code}
		tab := s.idxTabs[key]
		if tab == nil {
			var err error
			if tab, err = parseAbbrev(s.secs.abbrev, abbrevOff, code); err != nil {
				continue
			}
			if s.idxTabs == nil {
				s.idxTabs = map[[2]uint64]*abbrevTable{}
			}
			s.idxTabs[key] = tab
		}
		rs, ok := s.readUnitDIE(u, tab)
		if !ok {
			continue
		}
		s.cus = append(s.cus, u)
		for _, rg := range rs {
			if rg[0] < rg[1] {
				s.allRanges = append(s.allRanges, cuRange{rg[0], rg[1], u})
				s.dirty = true
			}
		}
		return u
	}
	s.idxDone = true
	s.idxTabs = nil
	return nil
}

const (
	tagCompileUnit  = 0x11
	tagPartialUnit  = 0x3c
	tagSkeletonUnit = 0x4a

	atStmtList       = 0x10
	atCompDir        = 0x1b
	atStrOffsetsBase = 0x72
	atAddrBase       = 0x73
	atRnglistsBase   = 0x74
)

// readUnitDIE reads the attributes of a unit's DIE into u and returns the
// unit's address ranges. The bases (str_offsets, addr, rnglists) are read
// in a first pass, since strx and addrx values depend on them.
func (s *Source) readUnitDIE(u *unit, tab *abbrevTable) ([][2]uint64, bool) {
	h := &u.hdr
	d := &dieBuf{b: s.secs.info[:h.end], off: int(h.die), bo: s.secs.order}
	a := tab.get(d.uleb())
	if a == nil || (a.tag != tagCompileUnit && a.tag != tagPartialUnit && a.tag != tagSkeletonUnit) {
		return nil, false
	}
	attrStart := d.off
	for _, sp := range a.attrs {
		switch sp.attr {
		case atStrOffsetsBase, atAddrBase, atRnglistsBase:
			v := s.secs.readValue(d, sp, h)
			switch sp.attr {
			case atStrOffsetsBase:
				h.strOffBase = v.u
			case atAddrBase:
				h.addrBase = v.u
			default:
				h.rnglistsBase = v.u
			}
		default:
			d.skipForm(sp.form, h)
		}
	}
	if d.err != nil {
		return nil, false
	}
	d.off = attrStart
	var low, high, ranges uint64
	var hasLow, hasHigh, highOff, hasRanges, rnglistx bool
	for _, sp := range a.attrs {
		switch sp.attr {
		case atLowPC:
			v := s.secs.readValue(d, sp, h)
			low, hasLow = v.u, v.ok
		case atHighPC:
			v := s.secs.readValue(d, sp, h)
			high, hasHigh = v.u, v.ok
			switch sp.form {
			case formAddr, formAddrx, formAddrx1, formAddrx2, formAddrx3, formAddrx4, formGNUAddrIndex:
			default:
				highOff = true
			}
		case atRanges:
			v := s.secs.readValue(d, sp, h)
			ranges, hasRanges, rnglistx = v.u, v.ok, sp.form == formRnglistx
		case atCompDir:
			if v := s.secs.readValue(d, sp, h); v.isStr {
				u.compDir = string(v.s)
			}
		case atStmtList:
			if v := s.secs.readValue(d, sp, h); v.ok {
				u.stmt = int64(v.u)
			}
		default:
			d.skipForm(sp.form, h)
		}
	}
	if d.err != nil {
		return nil, false
	}
	if hasLow {
		h.base = low
	}
	var rs [][2]uint64
	if hasLow && hasHigh {
		if highOff {
			high += low
		}
		rs = append(rs, [2]uint64{low, high})
	}
	if hasRanges {
		rs = s.secs.rangesAt(ranges, rnglistx, h, rs)
	}
	return rs, true
}

func readOff(b []byte, size uint64, order binary.ByteOrder) uint64 {
	if size == 8 {
		if len(b) < 8 {
			return 0
		}
		return order.Uint64(b)
	}
	if len(b) < 4 {
		return 0
	}
	return uint64(order.Uint32(b))
}

// mergeRanges turns possibly overlapping unit ranges into a sorted,
// disjoint table; where ranges overlap the unit that comes first in
// .debug_info wins, as in LLVM's DWARFDebugAranges.
func mergeRanges(all []cuRange) []cuRange {
	if len(all) == 0 {
		return nil
	}
	// Usually units do not overlap: sorting is all there is to do.
	sorted := slices.Clone(all)
	slices.SortStableFunc(sorted, func(a, b cuRange) int { return cmp.Compare(a.lo, b.lo) })
	overlap := false
	for i := 1; i < len(sorted); i++ {
		if sorted[i].lo < sorted[i-1].hi {
			overlap = true
			break
		}
	}
	if !overlap {
		return sorted
	}
	order := map[*unit]int{}
	for i, r := range all {
		if _, ok := order[r.cu]; !ok {
			order[r.cu] = i
		}
	}
	type ev struct {
		at    uint64
		start bool
		cu    *unit
	}
	evs := make([]ev, 0, 2*len(all))
	for _, r := range all {
		evs = append(evs, ev{r.lo, true, r.cu}, ev{r.hi, false, r.cu})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	active := map[*unit]int{}
	var out []cuRange
	var cur *unit
	var curLo uint64
	best := func() *unit {
		var b *unit
		for u := range active {
			if b == nil || order[u] < order[b] {
				b = u
			}
		}
		return b
	}
	for i := 0; i < len(evs); {
		at := evs[i].at
		for ; i < len(evs) && evs[i].at == at; i++ {
			if evs[i].start {
				active[evs[i].cu]++
			} else if active[evs[i].cu]--; active[evs[i].cu] <= 0 {
				delete(active, evs[i].cu)
			}
		}
		nb := best()
		if nb != cur {
			if cur != nil && curLo < at {
				out = append(out, cuRange{curLo, at, cur})
			}
			cur, curLo = nb, at
		}
	}
	return out
}

// unitFor returns the first unit, in section order, whose ranges hold
// addr (mergeRanges keeps the first of overlapping units), or nil. Units
// are indexed in section order until one holds addr, so the indexed ones
// answer as the whole index would.
func (s *Source) unitFor(addr uint64) *unit {
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	for {
		if s.dirty {
			s.cuRanges, s.dirty = mergeRanges(s.allRanges), false
		}
		i := sort.Search(len(s.cuRanges), func(i int) bool { return s.cuRanges[i].hi > addr })
		if i < len(s.cuRanges) && s.cuRanges[i].lo <= addr {
			return s.cuRanges[i].cu
		}
		if s.idxDone {
			return nil
		}
		// Index until a unit holds addr, then on to twice the offset
		// indexed before, so that the ranges are merged again only a
		// logarithmic number of times.
		target, found := 2*s.idxOff, false
		for !found || s.idxOff < target {
			u := s.indexNext()
			if u == nil {
				break
			}
			for _, r := range s.allRanges[len(s.allRanges)-countRanges(s.allRanges, u):] {
				if r.lo <= addr && addr < r.hi {
					found = true
				}
			}
		}
	}
}

// countRanges returns how many ranges at the end of all belong to u.
func countRanges(all []cuRange, u *unit) int {
	n := 0
	for n < len(all) && all[len(all)-1-n].cu == u {
		n++
	}
	return n
}

// unitAt returns the indexed unit whose DIEs hold off, indexing units up
// to off first.
func (s *Source) unitAt(off uint64) *unit {
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	for s.idxOff <= off && s.indexNext() != nil {
	}
	i := sort.Search(len(s.cus), func(i int) bool { return s.cus[i].hdr.end > off })
	if i == len(s.cus) || off < s.cus[i].hdr.die {
		return nil
	}
	return s.cus[i]
}

func (s *Source) load(u *unit) error {
	u.once.Do(func() {
		if u.stmt >= 0 && s.lines.Line != nil {
			order := s.secs.order
			t, err := dwarfline.Parse(s.ensureLine(uint64(u.stmt), order), uint64(u.stmt), u.addrSize, order)
			if err == nil || t != nil {
				u.lines = t
			}
			if t == nil {
				u.err = err
			}
		}
		tree, err := buildTree(&s.secs, &u.hdr)
		u.tree = tree
		if err != nil && u.err == nil {
			u.err = err
		}
	})
	return u.err
}

// Symbolize implements symbolizer.Source. addr is a virtual address of
// the file. The frames follow llvm-symbolizer: the innermost inlined
// function first, its file:line:column from the line table; each outer
// frame at the call site recorded by the inlined subroutine inside it;
// the outermost function named after the ELF symbol covering addr when
// there is one; names demangled. With neither DWARF nor symbol, nothing
// is appended.
func (s *Source) Symbolize(addr uint64, dst []symbolizer.Frame) ([]symbolizer.Frame, error) {
	start := len(dst)
	var err error
	if s.hasDWARF {
		if u := s.unitFor(addr); u != nil {
			err = s.load(u)
			dst = s.frames(u, addr, dst)
		}
	} else if s.gopcln != nil {
		if dst = s.goFrames(addr, dst); len(dst) > start {
			// Go names are not mangled and the tables name the
			// outermost function themselves.
			return dst, nil
		}
	}
	if sym, ok := s.syms.lookup(addr); ok {
		if len(dst) == start {
			dst = append(dst, symbolizer.Frame{})
		}
		dst[len(dst)-1].Function = sym.name
		if dst[len(dst)-1].File == "" {
			dst[len(dst)-1].File = sym.file
		}
	}
	for i := start; i < len(dst); i++ {
		dst[i].Function = s.demangle(dst[i].Function)
	}
	if err != nil && len(dst) > start {
		// Damaged tables still gave an answer: return it, not the error.
		err = nil
	}
	return dst, err
}

func (s *Source) frames(u *unit, addr uint64, dst []symbolizer.Frame) []symbolizer.Frame {
	var chain [64]int32
	n := 0
	if u.tree != nil {
		n = u.tree.chain(addr, chain[:])
	}
	if n == 0 {
		if u.lines != nil {
			if row, ok := u.lines.Lookup(addr); ok {
				if name, ok := u.fileName(uint64(row.File), s.dir0); ok {
					dst = append(dst, symbolizer.Frame{File: name, Line: int(row.Line), Column: int(row.Column)})
				}
			}
		}
		return dst
	}
	t := u.tree
	var callFile, callLine, callCol uint64
	for i := 0; i < n; i++ {
		nd := &t.nodes[chain[i]]
		var fr symbolizer.Frame
		fr.Function = t.name(s, nd.off)
		if u.lines != nil {
			if i == 0 {
				if row, ok := u.lines.Lookup(addr); ok {
					if name, ok := u.fileName(uint64(row.File), s.dir0); ok {
						fr.File = name
						fr.Line, fr.Column = int(row.Line), int(row.Column)
					}
				}
			} else {
				fr.File, _ = u.fileName(callFile, s.dir0)
				fr.Line, fr.Column = int(callLine), int(callCol)
			}
		} else if i > 0 {
			fr.Line, fr.Column = int(callLine), int(callCol)
		}
		callFile, callLine, callCol = nd.callFile, nd.callLine, nd.callCol
		dst = append(dst, fr)
	}
	return dst
}

var _ symbolizer.Source = (*Source)(nil)

// demangle demangles name once per Source: the same few functions recur
// in every stack, and demangling a heavily templated name costs more than
// finding it.
func (s *Source) demangle(name string) string {
	if s.noDemangle || name == "" || s.demangleFn == nil && (len(name) < 2 || name[0] != '_') {
		return name
	}
	if v, ok := s.demangled.Load(name); ok {
		return v.(string)
	}
	var d string
	if s.demangleFn != nil {
		d = s.demangleFn(name)
	} else {
		d = symbolizer.Demangle(name)
	}
	s.demangled.Store(name, d)
	return d
}

// Prefetch builds the tables of the compile units holding addrs on
// workers goroutines, so a batch of addresses uses every core; later
// Symbolize calls then only look up.
func (s *Source) Prefetch(addrs []uint64, workers int) {
	if !s.hasDWARF {
		return
	}
	seen := map[*unit]bool{}
	var units []*unit
	for _, a := range addrs {
		if u := s.unitFor(a); u != nil && !seen[u] {
			seen[u] = true
			units = append(units, u)
		}
	}
	if workers < 1 {
		workers = 1
	}
	ch := make(chan *unit)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range ch {
				s.load(u)
			}
		}()
	}
	for _, u := range units {
		ch <- u
	}
	close(ch)
	wg.Wait()
}

type fileName struct {
	name string
	ok   bool
}

// fileName returns the joined path of file i of the unit's line table,
// joining each once.
func (u *unit) fileName(i uint64, dir0 bool) (string, bool) {
	u.namesMu.Lock()
	defer u.namesMu.Unlock()
	if f, ok := u.names[i]; ok {
		return f.name, f.ok
	}
	name, ok := u.lines.FileName(i, u.compDir)
	if dir0 {
		name, ok = u.lines.FileNameDir0(i, u.compDir)
	}
	if u.names == nil {
		u.names = map[uint64]fileName{}
	}
	u.names[i] = fileName{name, ok}
	return name, ok
}
