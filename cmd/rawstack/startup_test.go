package main

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Start-up budget of every command (issue 14: ≤ 3 ms). Wall-clock time is
// too noisy on shared machines to fail a test on, so the guard pins what
// the time is made of and what does not vary with load: the heap that
// package initialization allocates (regexps compiled at package level,
// tables built in init) and how many packages run init work. Both figures
// are printed per package so a regression names its package.
const (
	// 106 KB and 111 packages at the ebpf merge: net/http and crypto (57
	// packages, for debuginfod and symbol servers) and cilium/ebpf (17
	// packages and 38 KB, encoding/xml among them through its
	// internal/testutils/testmain) are most of it. pprof's profile
	// package alone had added 167 KB.
	maxInitBytes    = 128 << 10
	maxInitPackages = 120
)

// heavyInit are packages whose init work is too much for a CLI that must
// start in 3 ms; link them from a separate binary or a child process.
var heavyInit = []string{
	"github.com/google/pprof/", // profile compiles regexps at init; driver pulls html/template
	"html/template",
	"text/template",
	"google.golang.org/grpc",
	"google.golang.org/protobuf/",
	"github.com/go-delve/",
}

type initCost struct {
	pkg   string
	ms    float64 // minimum over runs
	bytes int64
}

// TestStartupInitCost builds rawstack as the README does and reads
// GODEBUG=inittrace=1 of "rawstack --help".
func TestStartupInitCost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI")
	}
	bin := buildCLI(t)
	if f, err := elf.Open(bin); err == nil {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("the README's build is dynamically linked: the dynamic loader adds ~1 ms to every command")
			}
		}
		f.Close()
	}
	costs := map[string]*initCost{}
	for run := 0; run < 5; run++ {
		c := exec.Command(bin, "--help")
		c.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("rawstack --help: %v\n%s", err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			// init PKG @T ms, D ms clock, B bytes, N allocs
			f := strings.Fields(l)
			if len(f) < 10 || f[0] != "init" {
				continue
			}
			d, _ := strconv.ParseFloat(f[4], 64)
			b, _ := strconv.ParseInt(f[7], 10, 64)
			ic := costs[f[1]]
			if ic == nil {
				ic = &initCost{pkg: f[1], ms: d, bytes: b}
				costs[f[1]] = ic
			}
			ic.ms = min(ic.ms, d)
		}
	}
	var list []*initCost
	var totalMS float64
	var totalBytes int64
	for _, c := range costs {
		list = append(list, c)
		totalMS += c.ms
		totalBytes += c.bytes
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ms > list[j].ms })
	var b strings.Builder
	fmt.Fprintf(&b, "package init of rawstack --help: %d packages, %.2f ms (sum of per-package minimum over 5 runs), %d bytes\n", len(list), totalMS, totalBytes)
	for i, c := range list {
		if i == 15 {
			break
		}
		fmt.Fprintf(&b, "  %6.3f ms %7d B  %s\n", c.ms, c.bytes, c.pkg)
	}
	t.Log(b.String())
	for _, c := range list {
		for _, h := range heavyInit {
			if strings.HasPrefix(c.pkg, h) {
				t.Errorf("%s runs init work in every rawstack command (%.3f ms, %d bytes): keep it out of cmd/rawstack's imports", c.pkg, c.ms, c.bytes)
			}
		}
	}
	if totalBytes > maxInitBytes {
		t.Errorf("package init allocates %d bytes, budget %d: see the table above", totalBytes, maxInitBytes)
	}
	if len(list) > maxInitPackages {
		t.Errorf("%d packages run init work, budget %d: see the table above", len(list), maxInitPackages)
	}
}
