//go:build linux

package cpython

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestTablesMatchHeaders compiles testdata/offsets.c against the headers
// of each installed CPython and compares what offsetof and sizeof give
// with the table of its minor version; for 3.13, the layout Find reads
// from the interpreter's own _Py_DebugOffsets must agree too.
func TestTablesMatchHeaders(t *testing.T) {
	cc := testbuild.Need(t, "cc", "compiles the offsets program against CPython's headers")
	for _, v := range []string{"3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "debian3.11"} {
		t.Run(v, func(t *testing.T) {
			python := testbuild.Python(t, v)
			minor := strings.TrimPrefix(v, "debian")
			inc := filepath.Join(filepath.Dir(filepath.Dir(python)), "include", "python"+minor)
			if v == "debian3.11" {
				inc = "/usr/include/python" + minor
			}
			if _, err := os.Stat(filepath.Join(inc, "internal", "pycore_pystate.h")); err != nil {
				testbuild.Skip(t, "no internal headers of CPython %s at %s (Debian: apt-get install python3.11-dev): %v", v, inc, err)
			}
			src, _ := filepath.Abs(filepath.Join("testdata", "offsets.c"))
			if minor == "3.8" || minor == "3.9" || minor == "3.10" {
				src, _ = filepath.Abs(filepath.Join("testdata", "offsets_legacy.c"))
			}
			bin := filepath.Join(t.TempDir(), "offsets")
			args := []string{"-I", inc, "-I", filepath.Join(inc, "internal"), "-o", bin, src}
			if v == "debian3.11" {
				args = append(args, "-I", "/usr/include/x86_64-linux-gnu/python"+minor)
			}
			if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
				t.Fatalf("cc %v: %v\n%s", args, err, out)
			}
			out, err := exec.Command(bin).Output()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]uint64{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				n, err := strconv.ParseUint(f[1], 0, 64)
				if err != nil {
					t.Fatalf("line %q", sc.Text())
				}
				got[f[0]] = n
			}
			lay, _ := tableOf(uint32(got["version"]) >> 16)
			if lay.legacy {
				want := map[string]uint64{
					"runtime.interpreters_head": lay.interpretersHead, "interp.threads_head": lay.threadsHead,
					"tstate.next": lay.tsNext, "tstate.thread_id": lay.tsThreadID, "tstate.frame": lay.tsFrame,
					"frame.code": lay.frCode, "frame.previous": lay.frPrevious, "frame.lasti": lay.frLasti,
					"code.name": lay.coQualname, "code.filename": lay.coFilename, "code.firstlineno": lay.coFirstLine,
					"code.linetable": lay.coLinetable, "code.code": lay.coCodeObj,
					"unicode.length": lay.uniLength, "unicode.state": lay.uniState, "unicode.ascii_size": lay.uniASCIISize,
					"unicode.compact_size": lay.uniCompactSize, "bytes.size": lay.bytesSize, "bytes.sval": lay.bytesData,
					"runtime.gil": lay.rtGIL, "gil.last_holder": lay.gilHolder, "gil.locked": lay.gilLocked,
				}
				for k, w := range want {
					if g, ok := got[k]; !ok || g != w {
						t.Errorf("%s: table %d, headers %d (%v)", k, w, g, ok)
					}
				}
				if len(got) != len(want)+1 {
					t.Errorf("the headers give %d fields, the table %d", len(got)-1, len(want))
				}
				return
			}
			want := map[string]uint64{
				"runtime.interpreters_head": lay.interpretersHead, "interp.threads_head": lay.threadsHead,
				"tstate.next": lay.tsNext, "tstate.native_thread_id": lay.tsNativeID,
				"frame.code": lay.frCode, "frame.instr": lay.frInstr, "frame.previous": lay.frPrevious, "frame.owner": lay.frOwner,
				"code.size": lay.coSize, "code.qualname": lay.coQualname, "code.filename": lay.coFilename,
				"code.firstlineno": lay.coFirstLine, "code.linetable": lay.coLinetable, "code.code_adaptive": lay.coCode,
				"unicode.length": lay.uniLength, "unicode.state": lay.uniState, "unicode.ascii_size": lay.uniASCIISize,
				"unicode.compact_size": lay.uniCompactSize, "bytes.size": lay.bytesSize, "bytes.sval": lay.bytesData,
				"gil.last_holder": lay.gilHolder, "gil.locked": lay.gilLocked,
			}
			if lay.interpGIL != 0 {
				want["interp.ceval_gil"] = lay.interpGIL
			} else {
				want["runtime.gil"] = lay.rtGIL
			}
			if lay.viaCFrame {
				want["tstate.cframe"], want["cframe.current_frame"] = lay.tsFrame, lay.cframeFrame
			} else {
				want["tstate.current_frame"] = lay.tsFrame
			}
			if lay.frIsEntry != 0 {
				want["frame.is_entry"] = lay.frIsEntry
			}
			for k, w := range want {
				if g, ok := got[k]; !ok || g != w {
					t.Errorf("%s: table %d, headers %d (%v)", k, w, g, ok)
				}
			}
			if len(got) != len(want)+1 {
				t.Errorf("the headers give %d fields, the table %d", len(got)-1, len(want))
			}
			if got["version"]>>16 < 0x030d {
				return
			}
			// 3.13+: the layout read from the interpreter's own debug offsets.
			lib := filepath.Join(filepath.Dir(filepath.Dir(python)), "lib", "libpython"+minor+".so.1.0")
			if _, err := os.Stat(lib); err != nil {
				lib = python
			}
			f, err := elf.Open(lib)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			in, err := Find(f, lib)
			if err != nil {
				t.Fatal(err)
			}
			table, _ := tableOf(in.Version >> 16)
			table.version = in.Version
			table.finish()
			if in.lay != table {
				t.Errorf("_Py_DebugOffsets of %s give\n%+v\nthe table\n%+v", lib, in.lay, table)
			}
		})
	}
}

// TestUnknownVersion: an interpreter rawstack has no layout for (3.7) is
// found and refused with ErrUnknownVersion, once per
// file; a process running it gets no frames and the session one error.
func TestUnknownVersion(t *testing.T) {
	python := testbuild.Python(t, "3.7")
	cmd := exec.Command(python, "-c", "import sys; print('ready', flush=True); sys.stdin.read()")
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("python3.7: %q %v", line, err)
	}
	s := NewSampling()
	pid := uint32(cmd.Process.Pid)
	if s.AttachMaps(pid) || s.AttachMaps(pid) {
		t.Fatal("attached to CPython 3.7")
	}
	errs := s.Errors()
	if len(errs) != 1 || !errors.Is(errs[0], ErrUnknownVersion) || !strings.Contains(errs[0].Error(), "3.7") {
		t.Fatalf("errors %v, want one ErrUnknownVersion naming 3.7", errs)
	}
	if frames, _ := s.Frames(pid, pid, 1); len(frames) != 0 {
		t.Fatalf("%d frames", len(frames))
	}
	t.Log(errs[0])
}
