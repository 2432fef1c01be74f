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

	"github.com/rawstack/rawstack/internal/testbuild"
)

// Start-up budget of every command (issue 14: ≤ 3 ms). Wall-clock time is
// too noisy on shared machines to fail a test on, so the guard pins what
// the time is made of and what does not vary with load: the heap that
// package initialization allocates (regexps compiled at package level,
// tables built in init) and how many packages run init work. Both figures
// are printed per package so a regression names its package.
const (
	// 40 KB and 43 packages once downloads moved to rawstack-fetch (106 KB
	// and 111 packages before: net/http and crypto were 57 packages).
	// pprof's profile package alone had added 167 KB. 33 KB and 38
	// packages once tracer, jit and kallsyms did no init work (issue 25);
	// 29 KB and 34 once the command table, format, procattr, symbolizer
	// and record did none either.
	maxInitBytes    = 36 << 10
	maxInitPackages = 40
)

// ownInit are the packages of this module that may run init work in
// every command (registrations, small tables); any other one must make
// its state on first use (a sync.Once, constants). Each init function
// is a page of code faulted in at start-up, and its allocations a page
// of heap or two.
var ownInit = map[string]bool{
	"main": true, // fetch.Register(companionGetter); the command table is static data
	"github.com/rawstack/rawstack/internal/unix":       true, // PageSize
	"github.com/rawstack/rawstack/platform/snapshot":   true, // an empty init the compiler emits (no work, no allocation)
	"github.com/rawstack/rawstack/symbolizer/elfsrc":   true, // RegisterOpener
	"github.com/rawstack/rawstack/symbolizer/kallsyms": true, // RegisterOpener
	"github.com/rawstack/rawstack/symbolizer/pesrc":    true, // RegisterOpener
}

// heavyInit are packages whose init work or size is too much for a CLI
// that must start in 3 ms; link them from a companion command (see
// companion.go) instead. An entry names the package and those under it.
var heavyInit = []string{
	"github.com/google/pprof", // profile compiles regexps at init; driver pulls html/template
	"html/template",
	"text/template",
	"google.golang.org/grpc",
	"google.golang.org/protobuf",
	"github.com/go-delve",
	"github.com/cilium/ebpf",   // rawstack-ebpf
	"go.opentelemetry.io/otel", // tracer/otelspan, for programs that use OpenTelemetry
	// rawstack-fetch: net/http and crypto/tls cost ~4 ms of start-up
	// (init, and 5 MB more binary to fault in).
	"net",
	"crypto/tls",
	"crypto/x509",
}

func isHeavy(pkg string) bool {
	for _, h := range heavyInit {
		if pkg == h || strings.HasPrefix(pkg, h+"/") {
			return true
		}
	}
	return false
}

// TestStartupDeps keeps the heavy packages out of rawstack's imports,
// whether or not they run init work.
func TestStartupDeps(t *testing.T) {
	goTool := testbuild.Need(t, "go", "lists rawstack's imports")
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if isHeavy(p) {
			t.Errorf("rawstack imports %s: every command would pay for it at start-up; use a companion command", p)
		}
	}
	// With no cgo package among its imports, even a plain go build or go
	// install (cgo enabled) makes a static binary.
	lc := exec.Command(goTool, "list", "-deps", "-f", "{{if .CgoFiles}}{{.ImportPath}}{{end}}", ".")
	lc.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err = lc.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if cgo := strings.Fields(string(out)); len(cgo) > 0 {
		t.Errorf("rawstack imports packages that use cgo (%s): go build without CGO_ENABLED=0 makes a dynamically linked binary, ~1 ms slower to start", strings.Join(cgo, " "))
	}
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
		if strings.HasPrefix(c.pkg, "github.com/rawstack/rawstack/") && !ownInit[c.pkg] {
			t.Errorf("%s runs init work in every rawstack command (%.3f ms, %d bytes): make its state on first use, or add it to ownInit with the reason", c.pkg, c.ms, c.bytes)
		}
		if isHeavy(c.pkg) {
			t.Errorf("%s runs init work in every rawstack command (%.3f ms, %d bytes): keep it out of cmd/rawstack's imports", c.pkg, c.ms, c.bytes)
		}
	}
	if totalBytes > maxInitBytes {
		t.Errorf("package init allocates %d bytes, budget %d: see the table above", totalBytes, maxInitBytes)
	}
	if len(list) > maxInitPackages {
		t.Errorf("%d packages run init work, budget %d: see the table above", len(list), maxInitPackages)
	}
}
