package elfsrc

import (
	"debug/dwarf"
	"fmt"
	"sort"
	"sync"
)

// node is a subprogram or inlined subroutine DIE with address ranges.
type node struct {
	off                         dwarf.Offset
	parent                      int32
	sub                         bool  // DW_TAG_subprogram
	rlo, rhi                    int32 // ranges[rlo:rhi]
	children                    []int32
	callFile, callLine, callCol uint64
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
	top    []topRange // sorted by lo; later DIEs win at equal lo

	mu    sync.Mutex
	names map[dwarf.Offset]nameInfo
	cache map[dwarf.Offset]string
}

type topRange struct {
	lo, hi uint64
	node   int32
}

func buildTree(d *dwarf.Data, cuOff dwarf.Offset) (*inlineTree, error) {
	t := &inlineTree{names: map[dwarf.Offset]nameInfo{}, cache: map[dwarf.Offset]string{}}
	r := d.Reader()
	r.Seek(cuOff)
	cu, err := r.Next()
	if err != nil || cu == nil {
		return t, err
	}
	if !cu.Children {
		return t, nil
	}
	// stack[i] is the nearest enclosing node at depth i (-1 for none).
	stack := []int32{-1}
	last := cu.Offset
	for len(stack) > 0 {
		e, err := r.Next()
		if err != nil {
			t.finish()
			return t, err
		}
		if e == nil {
			break
		}
		if e.Tag != 0 && e.Offset <= last {
			t.finish()
			return t, fmt.Errorf("debug_info offset %#x: entries do not advance", e.Offset)
		}
		if e.Tag != 0 {
			last = e.Offset
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		encl := stack[len(stack)-1]
		cur := encl
		switch e.Tag {
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
			ni := nameInfo{}
			ni.linkage, _ = e.Val(dwarf.AttrLinkageName).(string)
			if ni.linkage == "" {
				ni.linkage, _ = e.Val(attrMIPSLinkageName).(string)
			}
			ni.name, _ = e.Val(dwarf.AttrName).(string)
			ni.origin, _ = e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
			ni.spec, _ = e.Val(dwarf.AttrSpecification).(dwarf.Offset)
			t.names[e.Offset] = ni
			rs, _ := d.Ranges(e)
			nd := node{off: e.Offset, parent: encl, sub: e.Tag == dwarf.TagSubprogram}
			nd.rlo = int32(len(t.ranges))
			for _, rg := range rs {
				if rg[0] < rg[1] {
					t.ranges = append(t.ranges, rg)
				}
			}
			nd.rhi = int32(len(t.ranges))
			if e.Tag == dwarf.TagInlinedSubroutine {
				nd.callFile, _ = asUint(e.Val(dwarf.AttrCallFile))
				nd.callLine, _ = asUint(e.Val(dwarf.AttrCallLine))
				nd.callCol, _ = asUint(e.Val(dwarf.AttrCallColumn))
			}
			if nd.rhi > nd.rlo || encl >= 0 {
				idx := int32(len(t.nodes))
				t.nodes = append(t.nodes, nd)
				if encl >= 0 {
					t.nodes[encl].children = append(t.nodes[encl].children, idx)
				} else {
					for _, rg := range t.ranges[nd.rlo:nd.rhi] {
						t.top = append(t.top, topRange{rg[0], rg[1], idx})
					}
				}
				cur = idx
			}
		}
		if e.Children {
			stack = append(stack, cur)
		}
	}
	t.finish()
	return t, nil
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
	sort.SliceStable(t.top, func(i, j int) bool { return t.top[i].lo < t.top[j].lo })
	j := 0
	for i := range t.top {
		if i+1 < len(t.top) && t.top[i+1].lo == t.top[i].lo {
			continue
		}
		t.top[j] = t.top[i]
		j++
	}
	t.top = t.top[:j]
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
	i := sort.Search(len(t.top), func(i int) bool { return t.top[i].lo > addr })
	if i == 0 {
		return 0
	}
	tr := t.top[i-1]
	if addr >= tr.hi {
		return 0
	}
	// Descend to the innermost node; among overlapping siblings the last
	// one wins, as in LLVM's address-to-DIE map.
	cur := tr.node
	for {
		next := int32(-1)
		ch := t.nodes[cur].children
		for k := len(ch) - 1; k >= 0; k-- {
			if t.contains(ch[k], addr) {
				next = ch[k]
				break
			}
		}
		if next < 0 {
			break
		}
		cur = next
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
func (t *inlineTree) name(d *dwarf.Data, off dwarf.Offset) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.cache[off]; ok {
		return s
	}
	linkage, short := "", ""
	seen := map[dwarf.Offset]bool{off: true}
	work := []dwarf.Offset{off}
	for len(work) > 0 && linkage == "" {
		o := work[len(work)-1]
		work = work[:len(work)-1]
		ni, ok := t.names[o]
		if !ok {
			ni, ok = readNameInfo(d, o)
			if !ok {
				continue
			}
			t.names[o] = ni
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
	s := linkage
	if s == "" {
		s = short
	}
	t.cache[off] = s
	return s
}

func readNameInfo(d *dwarf.Data, off dwarf.Offset) (nameInfo, bool) {
	r := d.Reader()
	r.Seek(off)
	e, err := r.Next()
	if err != nil || e == nil || e.Offset != off {
		return nameInfo{}, false
	}
	var ni nameInfo
	ni.linkage, _ = e.Val(dwarf.AttrLinkageName).(string)
	if ni.linkage == "" {
		ni.linkage, _ = e.Val(attrMIPSLinkageName).(string)
	}
	ni.name, _ = e.Val(dwarf.AttrName).(string)
	ni.origin, _ = e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
	ni.spec, _ = e.Val(dwarf.AttrSpecification).(dwarf.Offset)
	return ni, true
}

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name, which older GCCs emit.
const attrMIPSLinkageName dwarf.Attr = 0x2007
