package symbolizer_test

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/symbolizer"
	_ "github.com/rawstack/rawstack/symbolizer/elfsrc"
)

// selfModule describes the test binary's first mapping from /proc/self/maps.
func selfModule(t *testing.T, path string) *symbolizer.Module {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		testbuild.Skip(t, "%v", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		testbuild.Skip(t, "no /proc/self/maps:"+" %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 6 || fl[5] != exe {
			continue
		}
		lo, hi, _ := strings.Cut(fl[0], "-")
		base, _ := strconv.ParseUint(lo, 16, 64)
		end, _ := strconv.ParseUint(hi, 16, 64)
		off, _ := strconv.ParseUint(fl[2], 16, 64)
		m := &symbolizer.Module{}
		m.Kind, m.Path, m.Base, m.FileOffset = format.ModuleELF, path, base, off
		// The whole image from the first mapping on: the text follows.
		m.Size = end - base + 1<<30
		return m
	}
	testbuild.Skip(t, "test binary not found in /proc/self/maps")
	return nil
}

//go:noinline
func resolverTarget() uintptr {
	pc, _, _, _ := runtime.Caller(0)
	return pc
}

func TestResolverNamesAndBoundsOpenFiles(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		testbuild.Skip(t, "%v", err)
	}
	// Two names of one file are two module files to the Resolver.
	link := filepath.Join(t.TempDir(), "self")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	pc := uint64(resolverTarget())
	r := symbolizer.NewResolver(nil, 1, 0)
	defer r.Close()
	var first []symbolizer.Frame
	for i, path := range []string{exe, link, exe} {
		m := selfModule(t, path)
		frames, rel, err := r.Resolve(m, pc)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(frames) == 0 || !strings.HasSuffix(frames[len(frames)-1].Function, "resolverTarget") {
			t.Fatalf("%s: %#x (rel %#x) resolved to %+v", path, pc, rel, frames)
		}
		if i == 0 {
			first = frames
		} else if !reflect.DeepEqual(frames, first) {
			t.Errorf("%s: %+v, first answer %+v", path, frames, first)
		}
		if n := r.Open(); n != 1 {
			t.Errorf("after %d files: %d open, bound is 1", i+1, n)
		}
	}
	// A module whose file does not exist: an error, remembered.
	m := selfModule(t, filepath.Join(t.TempDir(), "missing"))
	if r.Known(m) {
		t.Error("Known before the first search")
	}
	if fr, _, err := r.Resolve(m, pc); err == nil || fr != nil {
		t.Errorf("missing file: frames %v, err %v", fr, err)
	}
	if !r.Known(m) {
		t.Error("a missing file is not remembered as searched")
	}
	if r.Known(selfModule(t, exe)) {
		t.Error("Known after eviction (bound 1)")
	}
}
