package symbolizer_test

import (
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
)

// TestSpliceJITFrames: a sample's JIT runtime frames replace the native
// frames whose addresses they carry, the inlined ones as one location's
// inlined frames, over a perf map's name for the same code; a group whose
// address the native stack lacks is left out.
func TestSpliceJITFrames(t *testing.T) {
	p := jitStream(t, func(w *format.Writer) {
		w.WriteJITCode(&format.JITCode{Time: 1, Pid: 7, Addr: 0x1000, Size: 0x100, Name: 1, Source: format.JITSourcePerfMap})
		w.WriteJITFunc(&format.JITFunc{ID: 1, Runtime: format.JITRuntimeV8, Name: "mix", File: "/srv/shop.js"})
		w.WriteJITFunc(&format.JITFunc{ID: 2, Runtime: format.JITRuntimeV8, Name: "total", File: "/srv/shop.js"})
		w.WriteJITFunc(&format.JITFunc{ID: 3, Runtime: format.JITRuntimeV8, Name: "handle", File: "/srv/shop.js"})
		w.WriteFrames(1, nil, format.PyGILNone, []format.JITFrame{
			{PC: 0x1010, Func: 1, Line: 9, Tier: format.JITTierOptimized, Inlined: true},
			{PC: 0x1010, Func: 2, Line: 16, Tier: format.JITTierOptimized},
			{PC: 0x9999, Func: 2, Line: 1, Tier: format.JITTierInterpreted}, // not in the native stack
			{PC: 0x5020, Func: 3, Line: 19, Tier: format.JITTierInterpreted},
		})
		w.WriteStack(1, []uint64{0x1010, 0x5010, 0x5020, 0x5030})
		w.WriteSample(format.Sample{Time: 2, Pid: 7, Tid: 7, Weight: 1, Stack: 1, Python: 1})
	})
	if len(p.Samples) != 1 {
		t.Fatalf("%d samples", len(p.Samples))
	}
	var got []string
	for _, li := range p.Samples[0].Locs {
		l := p.Locations[li]
		s := ""
		for i, f := range l.Frames {
			if i > 0 {
				s += "<"
			}
			s += f.Function
			if f.Line > 0 {
				s += ":" + itoa(f.Line)
			}
		}
		if l.Module != nil && l.Module.Path == "[v8]" {
			s = "[v8] " + s
		}
		if s == "" {
			s = l.String()
		}
		got = append(got, s)
	}
	// Frames 1 and 3 stay native (node's file is not here: unnamed).
	want := []string{"[v8] mix:9<total:16", "", "[v8] handle:19", ""}
	if len(got) != len(want) {
		t.Fatalf("stack %q, want %q", got, want)
	}
	for i := range want {
		native := want[i] == "" && !strings.HasPrefix(got[i], "[v8]")
		if got[i] != want[i] && !native {
			t.Errorf("frame %d: %q, want %q (stack %q)", i, got[i], want[i], got)
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}
