//go:build linux

package jit

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform"
)

type jitRecorder struct {
	platform.Handler
	codes   []platform.JITCode
	unloads []format.JITUnload
}

func (r *jitRecorder) JITCode(e *platform.JITCode) {
	c := *e
	c.Lines = append([]platform.JITLine(nil), e.Lines...)
	c.Code = append([]byte(nil), e.Code...)
	r.codes = append(r.codes, c)
}
func (r *jitRecorder) JITUnload(e *format.JITUnload) { r.unloads = append(r.unloads, *e) }

func (r *jitRecorder) names() string {
	var n []string
	for _, c := range r.codes {
		n = append(n, fmt.Sprintf("%s@%#x", c.Name, c.Addr))
	}
	return strings.Join(n, ",")
}

// TestJITTrackerPerfMap tails this process's own perf map: lines appended
// while recording are read once, a partial line waits for its newline, and
// a map rewritten from scratch (as the JVM does at exit) yields only its
// new lines.
func TestJITTrackerPerfMap(t *testing.T) {
	pid := uint32(os.Getpid())
	path := fmt.Sprintf("/tmp/perf-%d.map", pid)
	t.Cleanup(func() { os.Remove(path) })
	rec := &jitRecorder{}
	j := New(platform.Config{}, rec)
	j.Track(pid)
	defer j.Close()
	write := func(s string, flag int) {
		f, err := os.OpenFile(path, flag|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(s)
		f.Close()
	}
	poll := func() { j.lastPoll = time.Time{}; j.Poll() }
	write("1000 10 first\n2000 20 sec", os.O_TRUNC)
	poll()
	if got := rec.names(); got != "first@0x1000" {
		t.Fatalf("after the first poll: %s", got)
	}
	write("ond\n3000 30 third\n", os.O_APPEND)
	poll()
	poll()
	if got := rec.names(); got != "first@0x1000,second@0x2000,third@0x3000" {
		t.Fatalf("after appending: %s", got)
	}
	// Appended again (code compiled anew where it was): reported again.
	write("1000 10 first\n", os.O_APPEND)
	poll()
	if got := rec.names(); got != "first@0x1000,second@0x2000,third@0x3000,first@0x1000" {
		t.Fatalf("after a repeated line: %s", got)
	}
	// Rewritten in place, shorter: the known lines are not repeated.
	write("0x2000 0x20 second\n0x4000 0x40 fourth at exit\n", os.O_TRUNC)
	j.Exit(pid)
	if got := rec.names(); got != "first@0x1000,second@0x2000,third@0x3000,first@0x1000,fourth at exit@0x4000" {
		t.Fatalf("after the rewrite: %s", got)
	}
	if len(j.procs) != 0 {
		t.Fatal("process still tracked after exit")
	}
	if rec.codes[3].Time < rec.codes[0].Time || rec.codes[0].Source != format.JITSourcePerfMap {
		t.Fatalf("times or source: %+v", rec.codes)
	}
}

// TestJITTrackerJitdump feeds a jitdump file written in pieces: debug info
// goes with the load it precedes, a move is an unload and a load with the
// same name, code bytes are kept only when asked, and a malformed record
// is reported with the file and offset and skipped.
func TestJITTrackerJitdump(t *testing.T) {
	pid := uint32(os.Getpid())
	dir := t.TempDir()
	path := filepath.Join(dir, fmt.Sprintf("jit-%d.dump", pid))
	le := binary.LittleEndian
	hdr := le.AppendUint32(nil, 0x4A695444)
	hdr = le.AppendUint32(hdr, 1)
	hdr = le.AppendUint32(hdr, 40)
	hdr = le.AppendUint32(hdr, 62)
	hdr = le.AppendUint32(hdr, 0)
	hdr = le.AppendUint32(hdr, pid)
	hdr = le.AppendUint64(hdr, 0)
	hdr = le.AppendUint64(hdr, 0)
	rec := func(id uint32, ts uint64, body []byte) []byte {
		b := le.AppendUint32(nil, id)
		b = le.AppendUint32(b, uint32(16+len(body)))
		b = le.AppendUint64(b, ts)
		return append(b, body...)
	}
	dbg := le.AppendUint64(le.AppendUint64(nil, 0x7000), 2)
	dbg = append(le.AppendUint32(le.AppendUint32(le.AppendUint64(dbg, 0x7000), 3), 5), "app.js\x00"...)
	dbg = append(le.AppendUint32(le.AppendUint32(le.AppendUint64(dbg, 0x7010), 4), 0), "app.js\x00"...)
	load := le.AppendUint32(le.AppendUint32(nil, pid), pid)
	load = le.AppendUint64(le.AppendUint64(le.AppendUint64(le.AppendUint64(load, 0x7000), 0x7000), 4), 9)
	load = append(append(load, "JS:*f\x00"...), 0x55, 0x48, 0x89, 0xe5)
	move := le.AppendUint32(le.AppendUint32(nil, pid), pid)
	move = le.AppendUint64(le.AppendUint64(le.AppendUint64(le.AppendUint64(le.AppendUint64(move, 0x7000), 0x7000), 0x9000), 4), 9)
	data := append(append([]byte{}, hdr...), rec(2, 100, dbg)...)
	data = append(data, rec(0, 101, []byte{1, 2, 3})...) // malformed: too short
	data = append(data, rec(0, 102, load)...)
	cut := len(data) - 5
	data = append(data, rec(1, 200, move)...)
	if err := os.WriteFile(path, data[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	r := &jitRecorder{}
	j := New(platform.Config{JITCodeBytes: true}, r)
	defer j.Close()
	if !j.MMap(pid, path) || j.MMap(pid, "/usr/lib/libjit-1.dump.so") {
		t.Fatal("jitdump marker not recognized, or a library taken for one")
	}
	if len(r.codes) != 0 {
		t.Fatalf("a partial record was reported: %+v", r.codes)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	j.Exit(pid)
	if len(r.codes) != 2 || len(r.unloads) != 1 {
		t.Fatalf("codes %+v unloads %+v", r.codes, r.unloads)
	}
	c := r.codes[0]
	if c.Name != "JS:*f" || c.Addr != 0x7000 || c.Size != 4 || c.Time != 102 || len(c.Code) != 4 || len(c.Lines) != 2 || c.Lines[1].Offset != 0x10 || c.Lines[0].Column != 5 || c.Lines[0].File != "app.js" {
		t.Fatalf("load %+v", c)
	}
	if m := r.codes[1]; m.Name != "JS:*f" || m.Addr != 0x9000 || m.Time != 200 || r.unloads[0].Addr != 0x7000 {
		t.Fatalf("move: %+v %+v", m, r.unloads)
	}
	if len(j.errs) != 1 || !strings.Contains(j.errs[0].Error(), path) || !strings.Contains(j.errs[0].Error(), fmt.Sprintf("offset %d", 40+16+len(dbg))) {
		t.Fatalf("errors %v", j.errs)
	}
}
