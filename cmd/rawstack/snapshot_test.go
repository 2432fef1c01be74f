package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/platform/snapshot"
)

// fakeSnapshot is a snapshot of a small C binary (not run): one thread
// whose frames are inner's entry and a return address inside outer, then
// a pc in no module.
func fakeSnapshot(t *testing.T) *snapshot.Snapshot {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		testbuild.Skip(t, "gcc not installed: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "snapshot_syms")
	if out, err := exec.Command("gcc", "-O2", "-o", exe, filepath.Join("testdata", "snapshot_syms.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]uint64{}
	for _, s := range syms {
		addr[s.Name] = s.Value
	}
	// Mapped with a load bias of 0x10000 (the addresses are link-time).
	const bias = 0x10000
	return &snapshot.Snapshot{
		Pid: 42, Name: "fake", Arch: arch.AMD64,
		Modules: []snapshot.Module{{Start: bias, End: bias + 1<<24, Path: exe, File: exe, Bias: bias, HaveBias: true, Kind: format.ModuleELF, BuildID: []byte{1, 2, 3}}},
		Threads: []snapshot.Thread{
			{Tid: 42, Name: "main", PCs: []uint64{bias + addr["inner"], bias + addr["outer"] + 5, 0x10}, Stop: arch.StopBadMemory},
			{Tid: 43, Err: io.ErrUnexpectedEOF},
		},
	}
}

// TestSnapshotPrint prints the fake snapshot without a symbol index
// cache, then twice with one (building the index, then reading it):
// the same names each time.
func TestSnapshotPrint(t *testing.T) {
	snap := fakeSnapshot(t)
	var out bytes.Buffer
	cache := t.TempDir()
	var first string
	for i, dir := range []string{"", cache, cache} {
		out.Reset()
		if err := printSnapshot(&out, snap, symtabNames, dir, nil); err != nil {
			t.Fatal(err)
		}
		got := out.String()
		for _, want := range []string{
			"PID 42 - process\nTID 42:\n#0  0x",
			" inner\n#1  0x",
			" outer\n#2  0x0000000000000010\n",
			"    (unwind stopped: bad memory)\nTID 43:\n  (unexpected EOF)\n",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("run %d: output lacks %q:\n%s", i, want, got)
			}
		}
		if i == 0 {
			first = got
		} else if got != first {
			t.Errorf("run %d (cache %s) printed\n%s\nwithout a cache\n%s", i, dir, got, first)
		}
	}
	if ents, _ := filepath.Glob(filepath.Join(cache, "*.symidx")); len(ents) != 1 {
		t.Errorf("cache holds %v, want one index", ents)
	}
	out.Reset()
	printSnapshot(&out, snap, noNames, "", nil)
	if base := filepath.Base(snap.Modules[0].Path); !strings.Contains(out.String(), " "+base+"+0x") {
		t.Errorf("--no-symbols output lacks module+offset:\n%s", out.String())
	}
}

func TestSnapshotStream(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snap.rawstack")
	if err := writeSnapshot(fakeSnapshot(t), path); err != nil {
		t.Fatal(err)
	}
	kinds := countKinds(t, path)
	want := map[format.Kind]int{format.KindProcess: 1, format.KindThreadStart: 2, format.KindThreadName: 1, format.KindModuleLoad: 1, format.KindStack: 1, format.KindSample: 1}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
}

func TestSnapshotUsage(t *testing.T) {
	for _, args := range [][]string{{"snapshot"}, {"snapshot", "-p", "1", "--core", "x"}, {"snapshot", "-p", "1", "extra"}} {
		var out, errb bytes.Buffer
		if rc := run(args, &out, &errb); rc != 2 {
			t.Errorf("%q: rc %d, want 2 (%s)", args, rc, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if rc := run([]string{"snapshot", "--core", "/nonexistent/core.1"}, &out, &errb); rc != 1 || !strings.Contains(errb.String(), "/nonexistent/core.1") {
		t.Errorf("missing core: rc %d, stderr %q", rc, errb.String())
	}
}

// appendFrameHead must print exactly what the fmt verbs it replaces do.
func TestAppendFrameHead(t *testing.T) {
	for _, i := range []int{0, 1, 9, 10, 99, 100, 511} {
		for _, pc := range []uint64{0, 1, 0x7f6014587f16, 0xffffffffffffffff, 0x8000000000000000} {
			got := string(appendFrameHead([]byte("x"), i, pc))
			if want := fmt.Sprintf("x#%-2d 0x%016x", i, pc); got != want {
				t.Errorf("appendFrameHead(%d, %#x) = %q, want %q", i, pc, got, want)
			}
		}
	}
}
