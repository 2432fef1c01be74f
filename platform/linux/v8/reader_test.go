package v8

import (
	"encoding/binary"
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// positionTable encodes entries (code offset, source position, statement)
// as V8's SourcePositionTableBuilder does: zigzag LEB128 deltas, the code
// offset delta negated minus one for a non-statement.
func positionTable(entries [][3]int64) []byte {
	var b []byte
	code, pos := int64(-1), int64(0)
	for _, e := range entries {
		d := e[0] - code
		if e[2] == 0 {
			d = -d - 1
		}
		b = binary.AppendVarint(b, d)
		b = binary.AppendVarint(b, e[1]-pos)
		code, pos = e[0], e[1]
	}
	return b
}

func rawPosition(scriptOffset, inlining int) uint64 {
	return uint64(scriptOffset+1)<<1 | uint64(inlining+1)<<31
}

func TestDecodePosition(t *testing.T) {
	table := positionTable([][3]int64{
		{0, int64(rawPosition(10, -1)), 1},
		{7, int64(rawPosition(42, 0)), 0},
		{20, int64(rawPosition(5, 1)), 1},
	})
	for _, c := range []struct {
		off         uint64
		script, inl int
	}{{0, 10, 0}, {6, 10, 0}, {7, 42, 1}, {19, 42, 1}, {20, 5, 2}, {1000, 5, 2}} {
		p := decodePosition(table, c.off)
		if p.scriptOffset() != c.script || p.inliningID() != c.inl || p.external() {
			t.Errorf("offset %d: script offset %d, inlining id %d; want %d, %d", c.off, p.scriptOffset(), p.inliningID(), c.script, c.inl)
		}
	}
	if p := decodePosition([]byte{0x80}, 3); p != 0 {
		t.Errorf("a truncated table gave %#x", p)
	}
}

func TestMaybeV8(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/bin/node": true, "/usr/local/bin/node20": true, "/usr/bin/nodejs": true,
		"/opt/lib/libnode.so.108": true, "/usr/bin/nodemon": false, "/bin/python3": false, "node-gyp": false,
	} {
		if got := MaybeV8(path); got != want {
			t.Errorf("MaybeV8(%q) = %v", path, got)
		}
	}
}

// TestFindNode reads the metadata of the node on PATH: for Node.js 20
// (V8 11.3) it must give what node20 holds, the layout the fuzz test
// walks; another version must be read or refused with its version named.
func TestFindNode(t *testing.T) {
	path, err := exec.LookPath("node")
	if err != nil {
		testbuild.Skip(t, "no node on PATH: the V8 layout test reads its metadata")
	}
	real, _ := filepath.EvalSymlinks(path)
	l, err := Load(real, real)
	if err != nil {
		if errors.Is(err, ErrUnknownVersion) && strings.Contains(err.Error(), "V8 ") {
			t.Skipf("node's V8 is not read: %v", err)
		}
		t.Fatal(err)
	}
	if l.Version[0] != 11 || l.Version[1] != 3 {
		t.Skipf("node's V8 is %s, not Node.js 20's 11.3", l.VersionString())
	}
	want := node20()
	want.Version, want.bytecodeSizes = l.Version, l.bytecodeSizes
	if !reflect.DeepEqual(l, want) {
		t.Errorf("node's layout\n%+v\nwant\n%+v", *l, *want)
	}
	if len(l.bytecodeSizes) == 0 {
		t.Error("no kBytecodeSizes read: baseline frames would get no line")
	}
	if _, err := Load("/bin/sh", "/bin/sh"); !IsNotV8(err) {
		t.Errorf("/bin/sh: %v, want not V8", err)
	}
}

// TestScriptLinesMovedSource: a Script read from a stale copy (the
// garbage collector moved it, and its source, since the pointer was
// read) names the source's old copy, whose map word forwards to where it
// is now; the lines are counted there. A source whose map cannot be read
// gives no lines (and is looked for again), never its bytes read as
// two-byte characters (type 0), which gave every line of a run as 1.
func TestScriptLinesMovedSource(t *testing.T) {
	l := node20()
	mem := map[uint64][]byte{}
	obj := func(addr uint64, size int) []byte {
		b := make([]byte, size)
		mem[addr] = b
		return b
	}
	put := func(b []byte, off, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	const tag = heapObjectTag
	// The one-byte string map (a Map whose instance type is 0x28).
	strMap := obj(0x10000, 64)
	binary.LittleEndian.PutUint16(strMap[l.instanceType:], 0x28)
	src := "// a comment\nfunction f() {\n  return 1;\n}\n"
	// The source where it is now, and its old copy, forwarding.
	now := obj(0x20000, int(l.seqChars)+len(src))
	put(now, l.mapOff, 0x10000+tag)
	binary.LittleEndian.PutUint32(now[l.strLength:], uint32(len(src)))
	copy(now[l.seqChars:], src)
	old := obj(0x30000, int(l.seqChars)+len(src))
	put(old, l.mapOff, 0x20000) // the new address, untagged
	binary.LittleEndian.PutUint32(old[l.strLength:], uint32(len(src)))
	// The Script's stale copy still names the old source.
	script := obj(0x40000, int(max(l.scriptName, l.scriptSource, l.scriptLineEnds))+8)
	put(script, l.scriptSource, 0x30000+tag)
	read := func(_ uint32, addr uint64, b []byte) bool {
		for base, m := range mem {
			if addr >= base && addr+uint64(len(b)) <= base+uint64(len(m)) {
				copy(b, m[addr-base:])
				return true
			}
		}
		return false
	}
	r := NewReader(read)
	p := &proc{l: l, types: map[uint64]uint16{}, srcs: map[uint64]*scriptInfo{}}
	s := r.script(p, 1, 0x40000+tag)
	if s == nil {
		t.Fatal("the Script was not read")
	}
	sfi := &sfiInfo{src: s}
	// "return 1" is on line 3.
	at := sourcePosition(uint64(strings.Index(src, "return")+1) << 1)
	if got := r.lineOf(p, 1, sfi, at); got != 3 {
		t.Errorf("line %d through the forwarded source, want 3", got)
	}

	// A source whose map cannot be read: no line, looked for again.
	put(script, l.scriptSource, 0x50000+tag) // nothing mapped there
	s = &scriptInfo{ptr: 0x40000 + tag, source: 0x50000 + tag}
	if got := r.lineOf(p, 1, &sfiInfo{src: s}, at); got != lineUnknown {
		t.Errorf("line %d from an unreadable source, want none", got)
	}
	if s.tried {
		t.Error("an unreadable source is not looked for again")
	}
}
