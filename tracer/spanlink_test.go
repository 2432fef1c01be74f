package tracer

import "testing"

// TestLinkOrder files one goroutine's linked spans as the drain does when
// the goroutine moves between two Ps: each drain files one ring's
// records, then the other's, which began earlier. All of them nest in a
// span that stays open while more than linkKeepMax spans end, so the
// spans forgotten are compacted out of the goroutine's list. A lookup
// must find the span open at its time, or the open span it nests in.
func TestLinkOrder(t *testing.T) {
	const g, batch = 0x1000, 200
	n := 2*linkKeepMax + 1000
	link := func(i int) Link { return Link{SpanID: [8]byte{1, byte(i), byte(i >> 8), byte(i >> 16)}} }
	ts := func(i int) int64 { return 100 + 10*int64(i) }
	var l linkState
	outer := &linkSpan{g: g, link: Link{SpanID: [8]byte{2}}}
	l.begin(outer, 1, 10)
	for b := 0; b < n; b += batch {
		for ring := 0; ring < 2; ring++ {
			for i := b + ring; i < min(b+batch, n); i += 2 {
				lk := &linkSpan{g: g, link: link(i)}
				l.begin(lk, 1, ts(i))
				l.end(lk, ts(i)+5)
			}
		}
		gl := l.of[g]
		for i := b; i < min(b+batch, n); i++ {
			if s := l.at(gl, ts(i)+2); s == 0 || l.recs[s].link != link(i) {
				t.Fatalf("span %d: in it, the lookup found slot %d", i, s)
			}
			if s := l.at(gl, ts(i)+7); s == 0 || l.recs[s].link != outer.link {
				t.Fatalf("span %d: after it, the lookup found slot %d, not the span it nests in", i, s)
			}
		}
	}
	if got := len(l.of[g].spans); got > 2*linkKeepMax+2*batch {
		t.Errorf("%d spans kept for the goroutine, want at most %d", got, 2*linkKeepMax+2*batch)
	}
}
