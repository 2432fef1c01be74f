//go:build linux

package tracer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
	"github.com/rawstack/rawstack/internal/wine"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

// TestSelfProfileUnderWine runs examples/selfprofile — a Go program that
// embeds the tracer — built for Windows under Wine, and checks its trace on
// Linux: a Windows/QPC stream whose samples, named by llvm-symbolizer from
// the DWARF inside the Go PE, show main.hashMany and main.sortMany called
// from main.main; the Capture marker; the suspended window in Stats.
func TestSelfProfileUnderWine(t *testing.T) {
	w := wine.Need(t)
	sym := testbuild.Need(t, "llvm-symbolizer-19", "names Go frames from the DWARF inside a PE")
	exe := w.GoBuild(t, "../examples/selfprofile")
	trace := filepath.Join(t.TempDir(), "self.rawstack")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := w.Command(ctx, exe, "-o", wine.Path(trace), "-d", "3s", "-F", "499").CombinedOutput()
	if err != nil {
		t.Fatalf("wine selfprofile.exe: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
	if !strings.Contains(string(out), "suspended") {
		t.Errorf("selfprofile printed no suspended-window figures")
	}
	r, err := format.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if h := r.Header(); h.OS != format.OSWindows || h.Clock != format.ClockQPC {
		t.Errorf("header %+v", h)
	}
	var exeMod *format.ModuleLoad
	stacks := map[uint64][]uint64{}
	count := map[uint64]int{}
	markers := 0
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case format.KindModuleLoad:
			if strings.HasSuffix(strings.ToLower(ev.ModuleLoad.Path), "selfprofile.exe") {
				m := ev.ModuleLoad
				exeMod = &m
			}
		case format.KindStack:
			stacks[ev.Stack.ID] = append([]uint64(nil), ev.Stack.PCs...)
		case format.KindSample:
			count[ev.Sample.Stack]++
		case format.KindMarker:
			markers++
		}
	}
	if exeMod == nil {
		t.Fatal("selfprofile.exe not among the modules")
	}
	if markers != 1 {
		t.Errorf("%d markers, want the one Capture", markers)
	}
	f, err := pe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	if exeMod.TimeDateStamp != f.TimeDateStamp || exeMod.SizeOfImage != f.SizeOfImage {
		t.Errorf("code id %08X%x, file has %s", exeMod.TimeDateStamp, exeMod.SizeOfImage, f.CodeID())
	}
	// Name every frame in the executable.
	var addrs []string
	var keys []uint64
	for _, pcs := range stacks {
		for i, pc := range pcs {
			if pc-exeMod.Base < exeMod.Size {
				a := pc - exeMod.Base + f.ImageBase
				if i > 0 {
					a--
				}
				addrs = append(addrs, fmt.Sprintf("0x%x", a))
				keys = append(keys, pc)
			}
		}
	}
	cmd := exec.Command(sym, append([]string{"--obj=" + exe, "--no-inlines"}, addrs...)...)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", sym, err)
	}
	lines := strings.Split(string(b), "\n")
	name := map[uint64]string{}
	for i, pc := range keys {
		if 3*i < len(lines) {
			name[pc] = lines[3*i]
		}
	}
	found := map[string]int{}
	chains := map[string]int{}
	total := 0
	for id, pcs := range stacks {
		var fns []string
		for _, pc := range pcs {
			if n, ok := name[pc]; ok {
				fns = append(fns, n)
			}
		}
		j := " " + strings.Join(fns, " ") + " "
		total += count[id]
		chains[j] += count[id]
		for _, want := range []string{"main.hashMany main.main", "main.sortMany main.main"} {
			if strings.Contains(j, " "+want+" ") {
				found[want] += count[id]
			}
		}
		if strings.Contains(j, "sort.") && strings.Contains(j, " main.sortMany main.main ") {
			found["sort.* main.sortMany"] += count[id]
		}
	}
	t.Logf("%d samples: %v", total, found)
	// Under Wine on a loaded machine a thread-sample takes milliseconds
	// and the 3 s run yields a hundred or two samples over five threads.
	h, so := found["main.hashMany main.main"], found["main.sortMany main.main"]
	if h < 2 || so < 2 || h+so < 8 {
		for c, n := range chains {
			t.Logf("%4d %s", n, c)
		}
		t.Errorf("known Go chains: %v", found)
	}
}
