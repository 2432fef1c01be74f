package elfsrc

import (
	"cmp"
	"debug/dwarf"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// node is a subprogram or inlined subroutine DIE with address ranges.
type node struct {
	off                         dwarf.Offset
	parent                      int32
	sub                         bool  // DW_TAG_subprogram
	rlo, rhi                    int32 // ranges[rlo:rhi]
	callFile, callLine, callCol uint64
}

type offName struct {
	off dwarf.Offset
	nameInfo
}

// nameInfo holds the attributes llvm-symbolizer names a subroutine from.
type nameInfo struct {
	linkage, name string
	origin, spec  dwarf.Offset // 0 if absent
}

// inlineTree is the subroutine tree of one compile unit.
type inlineTree struct {
	nodes  []node
	ranges [][2]uint64
	top    []topRange // all subroutine ranges, sorted by lo
	maxHi  []uint64   // maxHi[i] is the largest hi of top[:i+1]

	mu sync.Mutex
	// names holds the subroutine DIEs of the unit in offset order (the
	// order they are read in), searched by bisection; extra holds DIEs
	// of other units looked up later.
	names []offName
	extra map[dwarf.Offset]nameInfo
	cache map[dwarf.Offset]string
}

type topRange struct {
	lo, hi uint64
	node   int32
}

// buildTree reads the subroutine tree of the unit described by h.
func buildTree(sec *dwarfSecs, h *unitHdr) (*inlineTree, error) {
	t := &inlineTree{extra: map[dwarf.Offset]nameInfo{}, cache: map[dwarf.Offset]string{}}
	tab, err := parseAbbrevs(sec.abbrev, h.abbrevOff)
	if err != nil {
		return t, err
	}
	tab.computeFixed(h)
	if h.end > uint64(len(sec.info)) || h.die >= h.end {
		return t, fmt.Errorf("debug_info unit at %#x: bad bounds", h.start)
	}
	d := &dieBuf{b: sec.info[:h.end], off: int(h.die), bo: sec.order}
	cu := tab.get(d.uleb())
	if cu == nil {
		return t, fmt.Errorf("debug_info offset %#x: unknown abbreviation", h.die)
	}
	for _, sp := range cu.attrs {
		d.skipForm(sp.form, h)
	}
	if !cu.children || d.err != nil {
		return t, d.err
	}
	var rs [][2]uint64
	// stack[i] is the nearest enclosing node at depth i (-1 for none).
	stack := []int32{-1}
	for len(stack) > 0 && d.off < len(d.b) && d.err == nil {
		off := dwarf.Offset(d.off)
		code := d.uleb()
		if code == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		a := tab.get(code)
		if a == nil {
			t.finish()
			return t, fmt.Errorf("debug_info offset %#x: unknown abbreviation %d", off, code)
		}
		encl := stack[len(stack)-1]
		cur := encl
		if a.tag == tagSubprogram || a.tag == tagInlined {
			var ni nameInfo
			var low, high uint64
			var hasLow, hasHigh, highOff bool
			var nd node
			rs = rs[:0]
			for _, sp := range a.attrs {
				switch sp.attr {
				case atLowPC:
					v := sec.readValue(d, sp, h)
					low, hasLow = v.u, v.ok
				case atHighPC:
					v := sec.readValue(d, sp, h)
					high, hasHigh = v.u, v.ok
					switch sp.form {
					case formAddr, formAddrx, formAddrx1, formAddrx2, formAddrx3, formAddrx4, formGNUAddrIndex:
					default:
						highOff = true
					}
				case atRanges:
					v := sec.readValue(d, sp, h)
					if v.ok {
						rs = sec.rangesAt(v.u, sp.form == formRnglistx, h, rs)
					}
				case atName, atLinkageName, atMIPSLinkage:
					v := sec.readValue(d, sp, h)
					if v.isStr {
						if sp.attr == atName {
							ni.name = string(v.s)
						} else {
							ni.linkage = string(v.s)
						}
					}
				case atAbstractOrig, atSpecification:
					v := sec.readValue(d, sp, h)
					if v.ok {
						ref := v.u
						if sp.form != formRefAddr {
							ref += h.start
						}
						if sp.attr == atAbstractOrig {
							ni.origin = dwarf.Offset(ref)
						} else {
							ni.spec = dwarf.Offset(ref)
						}
					}
				case atCallFile:
					nd.callFile = sec.readValue(d, sp, h).u
				case atCallLine:
					nd.callLine = sec.readValue(d, sp, h).u
				case atCallColumn:
					nd.callCol = sec.readValue(d, sp, h).u
				default:
					d.skipForm(sp.form, h)
				}
			}
			if hasLow && hasHigh {
				if highOff {
					high += low
				}
				rs = append(rs, [2]uint64{low, high})
			}
			t.names = append(t.names, offName{off, ni})
			nd.off, nd.parent, nd.sub = off, encl, a.tag == tagSubprogram
			if a.tag != tagInlined {
				nd.callFile, nd.callLine, nd.callCol = 0, 0, 0
			}
			nd.rlo = int32(len(t.ranges))
			for _, rg := range rs {
				if rg[0] < rg[1] {
					t.ranges = append(t.ranges, rg)
				}
			}
			nd.rhi = int32(len(t.ranges))
			// Every subroutine is a node, so chains walk through
			// those without ranges; every range goes in the address
			// index, nested or not (a lambda's operator() is a
			// subprogram nested in its function's DIE, outside the
			// function's ranges).
			idx := int32(len(t.nodes))
			t.nodes = append(t.nodes, nd)
			for _, rg := range t.ranges[nd.rlo:nd.rhi] {
				t.top = append(t.top, topRange{rg[0], rg[1], idx})
			}
			cur = idx
		} else if a.fixed >= 0 {
			d.skip(uint64(a.fixed))
		} else {
			for _, sp := range a.attrs {
				d.skipForm(sp.form, h)
			}
		}
		if a.children {
			stack = append(stack, cur)
		}
	}
	t.finish()
	return t, d.err
}

func asUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case int64:
		return uint64(x), true
	case uint64:
		return x, true
	}
	return 0, false
}

func (t *inlineTree) finish() {
	slices.SortStableFunc(t.top, func(a, b topRange) int { return cmp.Compare(a.lo, b.lo) })
	t.maxHi = make([]uint64, len(t.top))
	var m uint64
	for i, r := range t.top {
		m = max(m, r.hi)
		t.maxHi[i] = m
	}
}

func (t *inlineTree) contains(n int32, addr uint64) bool {
	nd := &t.nodes[n]
	for _, rg := range t.ranges[nd.rlo:nd.rhi] {
		if rg[0] <= addr && addr < rg[1] {
			return true
		}
	}
	return false
}

// chain writes the subroutines containing addr into out, innermost first,
// up to and including the innermost DW_TAG_subprogram, and returns how
// many it wrote.
func (t *inlineTree) chain(addr uint64, out []int32) int {
	// The innermost subroutine is the one read last (DIEs are read in
	// pre-order, children after parents) among those whose ranges hold
	// addr: what LLVM's address-to-DIE map yields for nested ranges.
	i := sort.Search(len(t.top), func(i int) bool { return t.top[i].lo > addr }) - 1
	cur := int32(-1)
	for j := i; j >= 0 && t.maxHi[j] > addr; j-- {
		if r := t.top[j]; addr < r.hi && r.node > cur {
			cur = r.node
		}
	}
	n := 0
	for cur >= 0 && n < len(out) {
		nd := &t.nodes[cur]
		out[n] = cur
		n++
		if nd.sub {
			break
		}
		cur = nd.parent
	}
	return n
}

// name returns the linkage name (else the name) of the subroutine at off,
// following DW_AT_abstract_origin and DW_AT_specification.
func (t *inlineTree) name(s *Source, off dwarf.Offset) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if name, ok := t.cache[off]; ok {
		return name
	}
	linkage, short := "", ""
	seen := map[dwarf.Offset]bool{off: true}
	work := []dwarf.Offset{off}
	for len(work) > 0 && linkage == "" {
		o := work[len(work)-1]
		work = work[:len(work)-1]
		ni, ok := t.lookupName(o)
		if !ok {
			ni, ok = t.extra[o]
		}
		if !ok {
			ni, ok = s.readNameInfo(o)
			if !ok {
				continue
			}
			t.extra[o] = ni
		}
		if ni.linkage != "" {
			linkage = ni.linkage
			break
		}
		if short == "" && ni.name != "" {
			short = ni.name
		}
		if ni.origin != 0 && !seen[ni.origin] {
			seen[ni.origin] = true
			work = append(work, ni.origin)
		}
		if ni.spec != 0 && !seen[ni.spec] {
			seen[ni.spec] = true
			work = append(work, ni.spec)
		}
	}
	name := linkage
	if name == "" {
		name = short
	}
	t.cache[off] = name
	return name
}

// readNameInfo reads the naming attributes of the DIE at off, which may
// lie in another unit (DW_FORM_ref_addr, LTO).
func (s *Source) readNameInfo(off dwarf.Offset) (nameInfo, bool) {
	u := s.unitAt(uint64(off))
	if u == nil {
		return nameInfo{}, false
	}
	h := &u.hdr
	tab, err := s.abbrevs(h.abbrevOff)
	if err != nil {
		return nameInfo{}, false
	}
	d := &dieBuf{b: s.secs.info[:h.end], off: int(off), bo: s.secs.order}
	a := tab.get(d.uleb())
	if a == nil {
		return nameInfo{}, false
	}
	var ni nameInfo
	for _, sp := range a.attrs {
		switch sp.attr {
		case atName, atLinkageName, atMIPSLinkage:
			if v := s.secs.readValue(d, sp, h); v.isStr {
				if sp.attr == atName {
					ni.name = string(v.s)
				} else {
					ni.linkage = string(v.s)
				}
			}
		case atAbstractOrig, atSpecification:
			if v := s.secs.readValue(d, sp, h); v.ok {
				ref := v.u
				if sp.form != formRefAddr {
					ref += h.start
				}
				if sp.attr == atAbstractOrig {
					ni.origin = dwarf.Offset(ref)
				} else {
					ni.spec = dwarf.Offset(ref)
				}
			}
		default:
			d.skipForm(sp.form, h)
		}
	}
	return ni, d.err == nil
}

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name, which older GCCs emit.
const attrMIPSLinkageName dwarf.Attr = 0x2007

func (t *inlineTree) lookupName(o dwarf.Offset) (nameInfo, bool) {
	i := sort.Search(len(t.names), func(i int) bool { return t.names[i].off >= o })
	if i < len(t.names) && t.names[i].off == o {
		return t.names[i].nameInfo, true
	}
	return nameInfo{}, false
}
