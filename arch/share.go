package arch

// CFAShare counts the rows of t that compute the CFA from register reg
// (match) among the rows that have a rule (total). A full table counts
// every row. A lazy table parses at most sample of its FDEs, spread
// evenly over its index, and counts their rows: an estimate that costs a
// few hundred FDE parses instead of the whole section, and warms the
// table where it parses. --unwind auto tells modules built with frame
// pointers (about a quarter of rows CFA = rbp+16) from those built
// without (a percent or two) by this share, so an estimate decides it as
// well as every row does.
func (t *Table) CFAShare(reg, sample int) (match, total int) {
	count := func(r Rule) {
		if r.CFA == CFANone {
			return
		}
		total++
		if r.CFA == CFAReg && int(r.CFAReg) == reg {
			match++
		}
	}
	if t.lazy == nil {
		for i := range t.ids {
			count(t.rules[t.ids[i]])
		}
		return match, total
	}
	l := t.lazy
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.n()
	if n == 0 {
		return 0, 0
	}
	if sample <= 0 || sample > n {
		sample = n
	}
	b := l.p.b
	for k := 0; k < sample; k++ {
		i := int(uint64(k) * uint64(n) / uint64(sample))
		fi, ok := l.parsed[i]
		if !ok {
			fi = l.parse(i)
			l.parsed[i] = fi
		}
		if fi < 0 {
			continue
		}
		f := b.fdes[fi]
		for _, r := range b.rows[f.from:f.to] {
			count(b.rules[r.id])
		}
	}
	return match, total
}
