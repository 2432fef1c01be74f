package hotspot

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// The fuzz input is a memory image: a header (the sample's pc, sp and fp,
// then the Layout's numbers, a word each), then chunks (address, length
// as uint16, bytes). A read succeeds when one chunk holds all of it. The
// seeds in testdata/fuzz/FuzzFrames are the memory a live walk of
// Shop.java's JVM read (TestCaptureSeeds writes them), so mutations start
// from a real layout, code heaps, nmethods, methods and stack.

// layoutWords returns pointers to l's numbers, in field order (the
// Version string left out).
func layoutWords(l *Layout) []reflect.Value {
	v := reflect.ValueOf(l).Elem()
	var out []reflect.Value
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if f.Kind() == reflect.String {
			continue
		}
		out = append(out, reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem())
	}
	return out
}

var fuzzHeader = 3*8 + 8*len(layoutWords(&Layout{}))

type image struct {
	addrs  []uint64
	chunks [][]byte
}

func parseImage(data []byte) (Regs, *Layout, *image, bool) {
	var regs Regs
	if len(data) < fuzzHeader {
		return regs, nil, nil, false
	}
	regs = Regs{PC: le64(data, 0), SP: le64(data, 8), FP: le64(data, 16)}
	l := &Layout{Version: "fuzz"}
	for i, w := range layoutWords(l) {
		v := le64(data, uint64(24+8*i))
		switch w.Kind() {
		case reflect.Bool:
			w.SetBool(v != 0)
		case reflect.Int64:
			w.SetInt(int64(v))
		default:
			w.SetUint(v)
		}
	}
	if l.check() != nil { // readLayout's check
		return regs, nil, nil, false
	}
	im := &image{}
	for rest := data[fuzzHeader:]; len(rest) >= 10; {
		addr, n := le64(rest, 0), int(binary.LittleEndian.Uint16(rest[8:]))
		rest = rest[10:]
		if n > len(rest) {
			n = len(rest)
		}
		im.addrs, im.chunks = append(im.addrs, addr), append(im.chunks, rest[:n])
		rest = rest[n:]
	}
	return regs, l, im, true
}

func (im *image) read(_ uint32, addr uint64, b []byte) bool {
	for i, a := range im.addrs {
		if addr >= a && addr-a <= uint64(len(im.chunks[i])) && uint64(len(b)) <= uint64(len(im.chunks[i]))-(addr-a) {
			copy(b, im.chunks[i][addr-a:])
			return true
		}
	}
	return false
}

// FuzzFrames reads a sample's Java frames from hostile memory: the
// tables, the code heaps, blobs, scopes, methods and the stack. It must
// not panic, loop or read without bounds, and what it returns must be
// consistent.
func FuzzFrames(f *testing.F) {
	f.Add(make([]byte, fuzzHeader))
	f.Fuzz(func(t *testing.T, data []byte) {
		regs, l, im, ok := parseImage(data)
		if !ok {
			return
		}
		r := NewReader(im.read)
		r.Attach(1, "libjvm.so", Symbols{}, l)
		for i := 0; i < 2; i++ { // the second walk goes through the caches
			frames, fresh, walk := r.Frames(1, regs, Stack{Live: true}, nil)
			if len(walk) > MaxDepth+2 {
				t.Fatalf("a walk of %d frames", len(walk))
			}
			for _, fn := range fresh {
				if fn.ID == 0 || fn.ID > r.Stats.Funcs {
					t.Fatalf("function id %d of %d", fn.ID, r.Stats.Funcs)
				}
			}
			for _, fr := range frames {
				if fr.Func == 0 || fr.Func > r.Stats.Funcs {
					t.Fatalf("frame names function %d of %d", fr.Func, r.Stats.Funcs)
				}
			}
		}
	})
}

// TestSeeds reads the seeds as FuzzFrames does: each names Java frames,
// and a busy JVM's main thread the chain C2 inlined.
func TestSeeds(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzFrames", "*"))
	if len(files) == 0 {
		t.Fatal("no seeds in testdata/fuzz/FuzzFrames")
	}
	inlined := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, lit, _ := strings.Cut(string(b), "[]byte(")
		data, err := strconv.Unquote(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(lit), ")")))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		regs, l, im, ok := parseImage([]byte(data))
		if !ok {
			t.Fatalf("%s: not an image", file)
		}
		r := NewReader(im.read)
		r.Attach(1, "libjvm.so", Symbols{}, l)
		frames, _, _ := r.Frames(1, regs, Stack{Live: true}, nil)
		if len(frames) < 3 {
			t.Errorf("%s: %d frames, want >= 3 (cuts %v)", file, len(frames), r.Stats.Cut)
		}
		for _, f := range frames {
			if f.Inlined {
				inlined++
			}
		}
	}
	if inlined == 0 {
		t.Error("no seed has an inlined frame")
	}
}

// CaptureSeed walks a thread of pid (registers regs, native stack pcs, its
// stack read live) with a Reader that records what it reads, from the
// thread's first frame in the code cache, and returns the memory image
// (FuzzFrames's input, which starts there) and the frames named.
func (s *Sampling) CaptureSeed(pid uint32, regs Regs, pcs []uint64) ([]byte, int) {
	rec := &recorder{read: s.read, mem: map[uint64][]byte{}}
	r := NewReader(func(_ uint32, a uint64, b []byte) bool { return rec.do(pid, a, b) })
	// The tables are not recorded: the seed has the layout they gave.
	l, err := readLayout(func(a uint64, b []byte) bool { return s.read(pid, a, b) }, s.r.procs[pid].syms)
	if err != nil {
		return nil, 0
	}
	r.Attach(1, "libjvm.so", s.r.procs[pid].syms, l)
	p := r.procs[1]
	if !r.ready(p, 1) {
		return nil, 0
	}
	pc, sp, fp, _, ok := r.start(p, 1, regs, Stack{Live: true}, pcs)
	if !ok {
		return nil, 0
	}
	regs = Regs{PC: pc, SP: sp, FP: fp}
	frames, _, _ := r.Frames(1, regs, Stack{Live: true}, nil)
	return rec.image(regs, p.layout), len(frames)
}

// recorder keeps the memory a reader read.
type recorder struct {
	read func(pid uint32, addr uint64, b []byte) bool
	mem  map[uint64][]byte
}

func (c *recorder) do(pid uint32, addr uint64, b []byte) bool {
	if !c.read(pid, addr, b) {
		return false
	}
	if old, ok := c.mem[addr]; !ok || len(old) < len(b) {
		c.mem[addr] = append([]byte(nil), b...)
	}
	return true
}

func (c *recorder) image(regs Regs, l *Layout) []byte {
	var out bytes.Buffer
	var w [8]byte
	put := func(v uint64) { binary.LittleEndian.PutUint64(w[:], v); out.Write(w[:]) }
	put(regs.PC)
	put(regs.SP)
	put(regs.FP)
	for _, w := range layoutWords(l) {
		switch w.Kind() {
		case reflect.Bool:
			v := uint64(0)
			if w.Bool() {
				v = 1
			}
			put(v)
		case reflect.Int64:
			put(uint64(w.Int()))
		default:
			put(w.Uint())
		}
	}
	addrs := make([]uint64, 0, len(c.mem))
	for a := range c.mem {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	for _, a := range addrs {
		for b := c.mem[a]; len(b) > 0; {
			n := min(len(b), 0xffff)
			put(a)
			out.Write([]byte{byte(n), byte(n >> 8)})
			out.Write(b[:n])
			a, b = a+uint64(n), b[n:]
		}
	}
	return out.Bytes()
}

// WriteSeed writes data as FuzzFrames's seed name.
func WriteSeed(t *testing.T, name string, data []byte) {
	dir := filepath.Join("testdata", "fuzz", "FuzzFrames")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n[]byte(")
	b.WriteString(quoteBytes(data))
	b.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func quoteBytes(data []byte) string {
	var b bytes.Buffer
	b.WriteByte('"')
	for _, c := range data {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			const hex = "0123456789abcdef"
			b.WriteString(`\x`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	b.WriteByte('"')
	return b.String()
}
