package tracer

import (
	"bytes"
	"io"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform"
)

// TestJITHotJoin: JIT code reported by the back end is written with its
// name interned, and a stream added later receives the code still valid
// (and the strings it names) in its snapshot, so it is self-contained.
func TestJITHotJoin(t *testing.T) {
	var first, late bytes.Buffer
	tr, err := newTracer(Options{Streams: []io.Writer{&first}})
	if err != nil {
		t.Fatal(err)
	}
	h := (*handler)(tr)
	h.JITCode(&platform.JITCode{Time: 10, Pid: 7, Addr: 0x1000, Size: 0x100, Name: "JS:*gone app.js:1:1", Source: format.JITSourcePerfMap})
	h.JITCode(&platform.JITCode{Time: 11, Pid: 7, Addr: 0x2000, Size: 0x80, Name: "JS:*kept app.js:2:1", Source: format.JITSourceJitdump,
		Code: []byte{0x55, 0xc3}, Lines: []platform.JITLine{{Offset: 4, Line: 2, Column: 1, File: "app.js"}}})
	h.JITUnload(&format.JITUnload{Time: 12, Pid: 7, Addr: 0x1000, Size: 0x100})
	if err := tr.AddStream(&late); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	tr.w.Flush()
	tr.closed = true
	tr.mu.Unlock()
	tr.closeStreams()

	read := func(b []byte) (codes []format.JITCode, strs map[uint64]string, unloads int) {
		r, err := format.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		strs = map[uint64]string{}
		for {
			ev, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch ev.Kind {
			case format.KindString:
				strs[ev.String.ID] = ev.String.Value
			case format.KindJITCode:
				c := ev.JITCode
				c.Lines = append([]format.JITLine(nil), c.Lines...)
				c.Code = append([]byte(nil), c.Code...)
				codes = append(codes, c)
			case format.KindJITUnload:
				unloads++
			}
		}
	}
	codes, strs, unloads := read(first.Bytes())
	if len(codes) != 2 || unloads != 1 || strs[codes[0].Name] != "JS:*gone app.js:1:1" || strs[codes[1].Lines[0].File] != "app.js" || !bytes.Equal(codes[1].Code, []byte{0x55, 0xc3}) {
		t.Fatalf("first stream: %+v %v %d", codes, strs, unloads)
	}
	codes, strs, _ = read(late.Bytes())
	if len(codes) != 1 || codes[0].Addr != 0x2000 || codes[0].Time != 11 || strs[codes[0].Name] != "JS:*kept app.js:2:1" || len(codes[0].Lines) != 1 || strs[codes[0].Lines[0].File] != "app.js" {
		t.Fatalf("late stream: %+v %v", codes, strs)
	}
}
