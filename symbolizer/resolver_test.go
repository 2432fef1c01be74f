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
	"time"

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

// TestResolverRetriesMissing: a file not found is remembered, and looked
// for again after a second, then twice as long each time: a library a
// recorder copies into the build-id cache an instant after its first
// sample was symbolized is named from the next search on.
func TestResolverRetriesMissing(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		testbuild.Skip(t, "%v", err)
	}
	clock := time.Now()
	defer symbolizer.SetNow(func() time.Time { return clock })()
	path := filepath.Join(t.TempDir(), "later")
	m := selfModule(t, path)
	pc := uint64(resolverTarget())
	r := symbolizer.NewResolver(nil, 0, 0)
	defer r.Close()
	if _, _, err := r.Resolve(m, pc); err == nil {
		t.Fatal("no error for a missing file")
	}
	if err := os.Symlink(exe, path); err != nil { // the copy lands
		t.Fatal(err)
	}
	clock = clock.Add(900 * time.Millisecond)
	if _, _, err := r.Resolve(m, pc); err == nil {
		t.Error("a miss is searched again before a second")
	}
	if !r.Known(m) {
		t.Error("a miss within its second is not Known")
	}
	clock = clock.Add(100 * time.Millisecond)
	if r.Known(m) {
		t.Error("a miss due to be searched again is Known")
	}
	frames, _, err := r.Resolve(m, pc)
	if err != nil || len(frames) == 0 || !strings.HasSuffix(frames[len(frames)-1].Function, "resolverTarget") {
		t.Fatalf("after the file appeared and a second passed: %+v, %v", frames, err)
	}
	// Misses back off: 1 s, 2 s, 4 s, ...
	gone := selfModule(t, filepath.Join(t.TempDir(), "never"))
	var searches []time.Duration
	start := clock
	for clock.Sub(start) < 20*time.Second {
		if !r.Known(gone) {
			searches = append(searches, clock.Sub(start))
			r.Resolve(gone, pc)
		}
		clock = clock.Add(100 * time.Millisecond)
	}
	want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second}
	if !reflect.DeepEqual(searches, want) {
		t.Errorf("searches at %v, want %v", searches, want)
	}
}
