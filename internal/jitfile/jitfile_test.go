package jitfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPerfMapNodeAndJava(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"node.map", "JS:*fibJit "},
		{"java.map", "long HotJava.mixHotJava(long)"},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		var n, hits int
		used, err := ParsePerfMap(tc.file, 0, data, func(e *PerfMapEntry) {
			n++
			if e.Size == 0 || e.Addr == 0 || len(e.Name) == 0 {
				t.Errorf("%s: entry %d: %#x %#x %q", tc.file, n, e.Addr, e.Size, e.Name)
			}
			if strings.HasPrefix(string(e.Name), tc.want) {
				hits++
			}
		})
		if err != nil || used != len(data) {
			t.Fatalf("%s: used %d of %d: %v", tc.file, used, len(data), err)
		}
		if lines := bytes.Count(data, []byte{'\n'}); n != lines || hits == 0 {
			t.Fatalf("%s: %d entries of %d lines, %d named %q", tc.file, n, lines, hits, tc.want)
		}
	}
}

// TestPerfMapIncremental: fed in pieces, as a runtime appends, the parser
// sees every line exactly once and never a partial one.
func TestPerfMapIncremental(t *testing.T) {
	data, _ := os.ReadFile(filepath.Join("testdata", "node.map"))
	var whole []string
	ParsePerfMap("m", 0, data, func(e *PerfMapEntry) { whole = append(whole, string(e.Name)) })
	for step := 1; step < 97; step += 7 {
		var got []string
		var pending []byte
		base := int64(0)
		for off := 0; off < len(data); off += step {
			pending = append(pending, data[off:min(off+step, len(data))]...)
			n, err := ParsePerfMap("m", base, pending, func(e *PerfMapEntry) { got = append(got, string(e.Name)) })
			if err != nil {
				t.Fatal(err)
			}
			pending = append(pending[:0], pending[n:]...)
			base += int64(n)
		}
		if strings.Join(got, "\n") != strings.Join(whole, "\n") {
			t.Fatalf("step %d: %d entries, want %d", step, len(got), len(whole))
		}
	}
}

func TestPerfMapMalformed(t *testing.T) {
	data := []byte("1000 20 good one\nzzzz 10 bad\n2000 0x30 with 0x prefix\n0xffffffffffffffff 2 wraps\n3000\n")
	var names []string
	n, err := ParsePerfMap("/tmp/perf-7.map", 100, data, func(e *PerfMapEntry) { names = append(names, string(e.Name)) })
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Offset != 117 || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "/tmp/perf-7.map") {
		t.Fatalf("err = %v, want a FormatError at offset 117", err)
	}
	if n != len(data) || strings.Join(names, "|") != "good one|with 0x prefix" {
		t.Fatalf("consumed %d, names %q", n, names)
	}
	long := bytes.Repeat([]byte{'a'}, MaxPerfMapLine+10)
	if n, err := ParsePerfMap("m", 0, long, func(*PerfMapEntry) {}); err == nil || n != len(long) {
		t.Fatalf("unterminated long line: consumed %d, err %v", n, err)
	}
}

func TestJitdumpNode(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "node.dump"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseJitdumpHeader("node.dump", data)
	if err != nil {
		t.Fatal(err)
	}
	if h.ElfMach != 62 || h.Pid == 0 || h.Flags&FlagArchTimestamp != 0 {
		t.Fatalf("header %+v", h)
	}
	count := map[uint32]int{}
	var lastDebug uint64
	used, err := ParseJitdump("node.dump", int64(h.Size), data[h.Size:], func(r *JitdumpRecord) {
		count[r.ID]++
		switch r.ID {
		case RecCodeLoad:
			if r.Pid != h.Pid || len(r.Name) == 0 || uint64(len(r.Code)) != r.CodeSize || r.CodeAddr == 0 {
				t.Errorf("load %+v", r)
			}
		case RecDebugInfo:
			if len(r.Lines) == 0 || r.Lines[0].Line == 0 || len(r.Lines[0].File) == 0 {
				t.Errorf("debug info %+v", r)
			}
			lastDebug = r.CodeAddr
		case RecUnwindingInfo:
			if len(r.Unwinding) == 0 {
				t.Errorf("unwinding %+v", r)
			}
		}
		if r.ID == RecCodeLoad && lastDebug != 0 && r.CodeAddr != lastDebug {
			t.Errorf("the debug info for %#x precedes a load of %#x", lastDebug, r.CodeAddr)
		}
	})
	if err != nil || used != len(data)-int(h.Size) {
		t.Fatalf("used %d of %d: %v", used, len(data)-int(h.Size), err)
	}
	if count[RecCodeLoad] < 3 || count[RecDebugInfo] < 1 || count[RecUnwindingInfo] < 1 {
		t.Fatalf("records %v", count)
	}
	// Cut anywhere: complete records are decoded, the partial one is left.
	for cut := int(h.Size); cut < len(data); cut += 13 {
		n, err := ParseJitdump("node.dump", int64(h.Size), data[h.Size:cut], func(*JitdumpRecord) {})
		if err != nil || n > cut-int(h.Size) {
			t.Fatalf("cut %d: %d, %v", cut, n, err)
		}
	}
}

func TestJitdumpMalformed(t *testing.T) {
	le := binary.LittleEndian
	rec := func(id uint32, body []byte) []byte {
		b := le.AppendUint32(nil, id)
		b = le.AppendUint32(b, uint32(16+len(body)))
		b = le.AppendUint64(b, 5)
		return append(b, body...)
	}
	var data []byte
	data = append(data, rec(RecCodeLoad, make([]byte, 12))...)                                      // too short
	data = append(data, rec(RecDebugInfo, le.AppendUint64(le.AppendUint64(nil, 0x1000), 1<<40))...) // absurd count
	good := le.AppendUint32(le.AppendUint32(nil, 7), 7)
	good = le.AppendUint64(le.AppendUint64(le.AppendUint64(le.AppendUint64(good, 0x1000), 0x1000), 4), 0)
	good = append(append(good, "fn\x00"...), 1, 2, 3, 4)
	data = append(data, rec(RecCodeLoad, good)...)
	var names []string
	n, err := ParseJitdump("jit-7.dump", 40, data, func(r *JitdumpRecord) { names = append(names, string(r.Name)) })
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Offset != 40 || n != len(data) || len(names) != 1 || names[0] != "fn" {
		t.Fatalf("n %d err %v names %q", n, err, names)
	}
	bad := le.AppendUint32(le.AppendUint32(nil, 0), 3)
	bad = append(bad, make([]byte, 8)...)
	if n, err := ParseJitdump("jit-7.dump", 40, bad, func(*JitdumpRecord) {}); err == nil || n != len(bad) {
		t.Fatalf("impossible size: %d, %v", n, err)
	}
	if _, err := ParseJitdumpHeader("x", []byte("JiTDxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")); err == nil {
		t.Fatal("swapped magic accepted")
	}
}
